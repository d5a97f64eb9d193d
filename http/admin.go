package http

// Admin routes: configure and the queue resources. Messages, dead letters, traces and consumer
// groups are in admin_*.go. Handlers decode and validate, call one persistence method and
// encode the reference's shapes (keys in alphabetical order, as the reference sends them).

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"queen/persistence"
)

// adminTimeFormat renders admin timestamps as the reference does: UTC, milliseconds, literal Z.
const adminTimeFormat = "2006-01-02T15:04:05.000Z"

func msTime(t time.Time) string { return t.UTC().Format(adminTimeFormat) }

func msTimePtr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := msTime(*t)
	return &s
}

// dbContext bounds one admin request's database work.
func (s *Server) dbContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.Config.RequestDeadline)
}

// uuidPath reads a path parameter that must be a UUID.
func uuidPath(ctx *fasthttp.RequestCtx, name string) (uuid.UUID, error) {
	id, err := uuid.Parse(pathParam(ctx, name))
	if err != nil {
		return id, badf(name + " must be a UUID")
	}
	return id, nil
}

// timeParam reads an optional RFC 3339 query parameter; nil when absent or empty.
func timeParam(args *fasthttp.Args, name string) (*time.Time, error) {
	v := string(args.Peek(name))
	if v == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return nil, badf(name + " must be an RFC 3339 timestamp")
	}
	return &t, nil
}

// maxPageLimit caps the limit of every paged admin list.
const maxPageLimit = 1000

// pageParams reads limit (default def, capped at maxPageLimit) and offset.
func pageParams(args *fasthttp.Args, def int) (limit, offset int, err error) {
	limit, offset = def, 0
	if v := args.Peek("limit"); len(v) > 0 {
		if limit, err = strconv.Atoi(string(v)); err != nil || limit < 1 {
			return 0, 0, badf("limit must be a positive integer")
		}
		limit = min(limit, maxPageLimit)
	}
	if v := args.Peek("offset"); len(v) > 0 {
		if offset, err = strconv.Atoi(string(v)); err != nil || offset < 0 {
			return 0, 0, badf("offset must be a non-negative integer")
		}
	}
	return limit, offset, nil
}

type paginationJSON struct {
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
}

// queueOptionsJSON is the full option set configure echoes.
type queueOptionsJSON struct {
	CompletedRetentionSeconds int  `json:"completedRetentionSeconds"`
	DeadLetterQueue           bool `json:"deadLetterQueue"`
	DelayedProcessing         int  `json:"delayedProcessing"`
	DLQAfterMaxRetries        bool `json:"dlqAfterMaxRetries"`
	EncryptionEnabled         bool `json:"encryptionEnabled"`
	LeaseTime                 int  `json:"leaseTime"`
	MaxSize                   int  `json:"maxSize"`
	MaxWaitTimeSeconds        int  `json:"maxWaitTimeSeconds"`
	Priority                  int  `json:"priority"`
	RetentionEnabled          bool `json:"retentionEnabled"`
	RetentionSeconds          int  `json:"retentionSeconds"`
	RetryDelay                int  `json:"retryDelay"`
	RetryLimit                int  `json:"retryLimit"`
	TTL                       int  `json:"ttl"`
	WindowBuffer              int  `json:"windowBuffer"`
}

type configureJSON struct {
	Configured  bool             `json:"configured"`
	Namespace   string           `json:"namespace"`
	Options     queueOptionsJSON `json:"options"`
	PartitionID string           `json:"partitionId"`
	Queue       string           `json:"queue"`
	QueueID     string           `json:"queueId"`
	Task        string           `json:"task"`
}

// decodeConfigure validates a configure body of a caller in scope. Options not mentioned (or
// null) keep their stored values; unknown options are ignored; namespace and task count only as
// strings.
func decodeConfigure(body []byte, scope persistence.Scope) (persistence.ConfigureRequest, error) {
	var r persistence.ConfigureRequest
	var req struct {
		Queue     json.RawMessage `json:"queue"`
		Namespace json.RawMessage `json:"namespace"`
		Task      json.RawMessage `json:"task"`
		Options   json.RawMessage `json:"options"`
	}
	if err := parseBody(body, &req); err != nil {
		return r, err
	}
	// The queue must be a string, but the reference accepts "" and configures a queue of that
	// name (the JS client's queue('').create() relies on it). Push and pop still refuse "".
	if len(req.Queue) == 0 || string(req.Queue) == "null" {
		return r, badf("queue is required")
	}
	queue, err := stringField(req.Queue, "queue", "")
	if err != nil {
		return r, err
	}
	if err = checkLen(queue, "queue"); err != nil {
		return r, err
	}
	r.Namespace, r.Task = optionalString(req.Namespace), optionalString(req.Task)
	opts := map[string]json.RawMessage{}
	if len(req.Options) > 0 && string(req.Options) != "null" {
		if req.Options[0] != '{' || json.Unmarshal(req.Options, &opts) != nil {
			return r, badf("options must be an object")
		}
	}
	o := &r.Options
	for _, f := range []struct {
		name string
		dst  **int
	}{
		{"leaseTime", &o.LeaseTime}, {"retryLimit", &o.RetryLimit}, {"retryDelay", &o.RetryDelay},
		{"maxSize", &o.MaxSize}, {"ttl", &o.TTL}, {"priority", &o.Priority},
		{"delayedProcessing", &o.DelayedProcessing}, {"windowBuffer", &o.WindowBuffer},
		{"retentionSeconds", &o.RetentionSeconds}, {"completedRetentionSeconds", &o.CompletedRetentionSeconds},
		{"maxWaitTimeSeconds", &o.MaxWaitTimeSeconds},
	} {
		if *f.dst, err = intOption(opts[f.name], f.name); err != nil {
			return r, err
		}
	}
	for _, f := range []struct {
		name string
		dst  **bool
	}{
		{"deadLetterQueue", &o.DeadLetterQueue}, {"dlqAfterMaxRetries", &o.DLQAfterMaxRetries},
		{"retentionEnabled", &o.RetentionEnabled}, {"encryptionEnabled", &o.EncryptionEnabled},
	} {
		if *f.dst, err = boolOption(opts[f.name], f.name); err != nil {
			return r, err
		}
	}
	r.Queue, err = queueName(scope, queue, "queue")
	return r, err
}

// optionalString is the value of a JSON string, nil for anything else.
func optionalString(raw json.RawMessage) *string {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return nil
	}
	return &s
}

// intOption reads an integer option: a JSON integer, or a string holding one, from 0 to the
// largest int4. Absent or null is nil.
func intOption(raw json.RawMessage, name string) (*int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	text := string(raw)
	if raw[0] == '"' {
		if json.Unmarshal(raw, &text) != nil {
			text = ""
		}
	}
	n, err := strconv.ParseInt(text, 10, 32)
	if err != nil || n < 0 {
		return nil, badf("options." + name + " must be a non-negative integer")
	}
	v := int(n)
	return &v, nil
}

// boolOption reads a boolean option; absent or null is nil.
func boolOption(raw json.RawMessage, name string) (*bool, error) {
	var v bool
	switch string(raw) {
	case "", "null":
		return nil, nil
	case "true":
		v = true
	case "false":
	default:
		return nil, badf("options." + name + " must be a boolean")
	}
	return &v, nil
}

func (s *Server) configure(ctx *fasthttp.RequestCtx) error {
	req, err := decodeConfigure(ctx.PostBody(), s.scope(ctx))
	if err != nil {
		return err
	}
	c, cancel := s.dbContext()
	defer cancel()
	q, err := s.Store.Configure(c, req)
	if err != nil {
		return err
	}
	if s.EncryptedQueues != nil {
		s.EncryptedQueues.Set(q.Queue, q.Options.EncryptionEnabled)
	}
	s.Control.AnnounceQueueChange(q.Queue, false)
	// Pops parked before the queue existed re-check it, and its parked gauge appears.
	s.Actors.Wake(q.Queue, nil)
	writeJSON(ctx, fasthttp.StatusOK, configureJSON{
		Configured: true, Namespace: q.Namespace, PartitionID: q.PartitionID.String(), Queue: q.Queue.Name,
		QueueID: q.ID.String(), Task: q.Task, Options: optionsJSON(q.Options),
	})
	return nil
}

func optionsJSON(o persistence.QueueOptions) queueOptionsJSON {
	return queueOptionsJSON{
		CompletedRetentionSeconds: o.CompletedRetentionSeconds, DeadLetterQueue: o.DeadLetterQueue,
		DelayedProcessing: o.DelayedProcessing, DLQAfterMaxRetries: o.DLQAfterMaxRetries,
		EncryptionEnabled: o.EncryptionEnabled, LeaseTime: o.LeaseTime, MaxSize: o.MaxSize,
		MaxWaitTimeSeconds: o.MaxWaitTimeSeconds, Priority: o.Priority, RetentionEnabled: o.RetentionEnabled,
		RetentionSeconds: o.RetentionSeconds, RetryDelay: o.RetryDelay, RetryLimit: o.RetryLimit, TTL: o.TTL,
		WindowBuffer: o.WindowBuffer,
	}
}

type queueCountsJSON struct {
	Pending    int64 `json:"pending"`
	Processing int64 `json:"processing"`
	Total      int64 `json:"total"`
}

type queueSummaryJSON struct {
	CreatedAt  string          `json:"createdAt"`
	ID         string          `json:"id"`
	Messages   queueCountsJSON `json:"messages"`
	Name       string          `json:"name"`
	Namespace  string          `json:"namespace"`
	Partitions int64           `json:"partitions"`
	Task       string          `json:"task"`
}

type queueListJSON struct {
	Queues []queueSummaryJSON `json:"queues"`
}

// queueSummary is a queue of the queue lists.
func queueSummary(q persistence.QueueSummary) queueSummaryJSON {
	return queueSummaryJSON{
		CreatedAt: msTime(q.CreatedAt), ID: q.ID.String(), Name: q.Queue.Name, Namespace: q.Namespace,
		Partitions: q.Partitions, Task: q.Task,
		Messages: queueCountsJSON{Pending: q.Messages.Pending, Processing: q.Messages.Processing, Total: q.Messages.Total},
	}
}

func (s *Server) listQueues(ctx *fasthttp.RequestCtx) error {
	c, cancel := s.dbContext()
	defer cancel()
	queues, err := s.Store.ListQueues(c, persistence.QueueFilter{Scope: s.scope(ctx)})
	if err != nil {
		return err
	}
	out := queueListJSON{Queues: make([]queueSummaryJSON, len(queues))}
	for i, q := range queues {
		out.Queues[i] = queueSummary(q)
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type partitionStatsJSON struct {
	Completed  int64 `json:"completed"`
	DeadLetter int64 `json:"deadLetter"`
	Failed     int64 `json:"failed"`
	Pending    int64 `json:"pending"`
	Processing int64 `json:"processing"`
	Total      int64 `json:"total"`
}

func statsJSON(s persistence.PartitionStats) partitionStatsJSON {
	return partitionStatsJSON{
		Completed: s.Completed, DeadLetter: s.DeadLetter, Failed: s.Failed, Pending: s.Pending,
		Processing: s.Processing, Total: s.Total,
	}
}

type partitionDetailJSON struct {
	CreatedAt     string             `json:"createdAt"`
	ID            string             `json:"id"`
	Name          string             `json:"name"`
	NewestMessage *string            `json:"newestMessage"`
	OldestMessage *string            `json:"oldestMessage"`
	Stats         partitionStatsJSON `json:"stats"`
}

type queueDetailJSON struct {
	CreatedAt  string                `json:"createdAt"`
	ID         string                `json:"id"`
	Name       string                `json:"name"`
	Namespace  string                `json:"namespace"`
	Options    queueOptionsJSON      `json:"options"` // an addition to the reference (docs/compat.md)
	Partitions []partitionDetailJSON `json:"partitions"`
	Task       string                `json:"task"`
	Totals     partitionStatsJSON    `json:"totals"`
}

// queueDetail reads the queue of the path parameter in the caller's scope; false when it has
// answered instead (bad name, database error, 404).
func (s *Server) queueDetail(ctx *fasthttp.RequestCtx) (*persistence.QueueDetail, error) {
	queue, err := queueName(s.scope(ctx), pathParam(ctx, "queue"), "queue")
	if err != nil {
		return nil, err
	}
	c, cancel := s.dbContext()
	defer cancel()
	q, err := s.Store.Queue(c, queue)
	if err != nil {
		return nil, err
	}
	if q == nil {
		return nil, notFoundf("Queue not found")
	}
	return q, nil
}

func (s *Server) getQueue(ctx *fasthttp.RequestCtx) error {
	q, err := s.queueDetail(ctx)
	if err != nil {
		return err
	}
	out := queueDetailJSON{
		CreatedAt: msTime(q.CreatedAt), ID: q.ID.String(), Name: q.Queue.Name, Namespace: q.Namespace, Task: q.Task,
		Options:    optionsJSON(q.Options),
		Partitions: make([]partitionDetailJSON, len(q.Partitions)), Totals: statsJSON(q.Totals),
	}
	for i, p := range q.Partitions {
		out.Partitions[i] = partitionDetailJSON{
			CreatedAt: msTime(p.CreatedAt), ID: p.ID.String(), Name: p.Name,
			NewestMessage: msTimePtr(p.Newest), OldestMessage: msTimePtr(p.Oldest), Stats: statsJSON(p.Stats),
		}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type deleteQueueJSON struct {
	Deleted bool   `json:"deleted"`
	Existed bool   `json:"existed"`
	Queue   string `json:"queue"`
}

// deleteQueue deletes a queue and everything in it. The queue's actor needs no notice: it keeps
// no queue state, and its parked pops read the (now empty) database on their next check.
func (s *Server) deleteQueue(ctx *fasthttp.RequestCtx) error {
	queue, err := queueName(s.scope(ctx), pathParam(ctx, "queue"), "queue")
	if err != nil {
		return err
	}
	c, cancel := s.dbContext()
	defer cancel()
	existed, err := s.Store.DeleteQueue(c, queue)
	if err != nil {
		return err
	}
	if s.EncryptedQueues != nil {
		s.EncryptedQueues.Set(queue, false)
	}
	s.Control.AnnounceQueueChange(queue, true)
	writeJSON(ctx, fasthttp.StatusOK, deleteQueueJSON{Deleted: true, Existed: existed, Queue: queue.Name})
	return nil
}

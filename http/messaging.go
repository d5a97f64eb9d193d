package http

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"queen/actors"
	"queen/fusion"
	"queen/persistence"
	"queen/telemetry"
)

// timeFormat renders timestamps as the clients expect: UTC, microseconds, a literal Z.
const timeFormat = "2006-01-02T15:04:05.000000Z"

// await waits for one reply for at most d.
func await[T any](ch <-chan T, d time.Duration) (T, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case v := <-ch:
		return v, nil
	case <-t.C:
		var zero T
		return zero, errDeadline
	}
}

func uuidText(u uuid.NullUUID) *string {
	if !u.Valid {
		return nil
	}
	s := u.UUID.String()
	return &s
}

// orNull is s, or nil (JSON null) for "", which persistence uses for an absent producer sub.
func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// pushResultJSON is one entry of the push answer, in the reference's mixed snake/camel case.
// PartitionID and TraceID are omitted for duplicates (nil) and null for queued items.
// A buffered item (spooled) carries queue, partition and transactionId as the reference's
// spool path writes them.
type pushResultJSON struct {
	Error              string          `json:"error,omitempty"`
	Index              int             `json:"index"`
	MessageID          string          `json:"message_id,omitempty"`
	Partition          string          `json:"partition,omitempty"`
	PartitionID        json.RawMessage `json:"partition_id,omitempty"`
	Queue              string          `json:"queue,omitempty"`
	QueueName          string          `json:"queueName"`
	Status             string          `json:"status"`
	TraceID            json.RawMessage `json:"trace_id,omitempty"`
	TransactionIDCamel string          `json:"transactionId,omitempty"`
	TransactionID      string          `json:"transaction_id"`
}

func jsonString(s *string) json.RawMessage {
	if s == nil {
		return json.RawMessage("null")
	}
	return appendJSONString(nil, *s)
}

// appendPushResults appends the answer of a push as encoding/json writes out (fields in the
// struct's order, omitempty as tagged; a test compares the two), by hand: json.Marshal of the
// answer was 6 % of the broker's CPU in the cost cycle.
func appendPushResults(buf []byte, out []pushResultJSON) []byte {
	return appendArray(buf, out, func(buf []byte, r *pushResultJSON) []byte {
		buf = append(buf, '{')
		if r.Error != "" {
			buf = append(buf, `"error":`...)
			buf = append(appendJSONString(buf, r.Error), ',')
		}
		buf = append(buf, `"index":`...)
		buf = strconv.AppendInt(buf, int64(r.Index), 10)
		buf = appendStringField(buf, `,"message_id":`, r.MessageID)
		buf = appendStringField(buf, `,"partition":`, r.Partition)
		buf = appendRawField(buf, `,"partition_id":`, r.PartitionID)
		buf = appendStringField(buf, `,"queue":`, r.Queue)
		buf = append(buf, `,"queueName":`...)
		buf = appendJSONString(buf, r.QueueName)
		buf = append(buf, `,"status":`...)
		buf = appendJSONString(buf, r.Status)
		buf = appendRawField(buf, `,"trace_id":`, r.TraceID)
		buf = appendStringField(buf, `,"transactionId":`, r.TransactionIDCamel)
		buf = append(buf, `,"transaction_id":`...)
		return append(appendJSONString(buf, r.TransactionID), '}')
	})
}

// appendArray appends out as a JSON array, each entry written by appendOne.
func appendArray[T any](buf []byte, out []T, appendOne func([]byte, *T) []byte) []byte {
	buf = append(buf, '[')
	for i := range out {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendOne(buf, &out[i])
	}
	return append(buf, ']')
}

// appendStringField appends key and v, an omitempty string field, unless v is empty.
func appendStringField(buf []byte, key, v string) []byte {
	if v == "" {
		return buf
	}
	return appendJSONString(append(buf, key...), v)
}

// appendRawField appends key and v, an omitempty json.RawMessage field (compact JSON), unless
// v is empty.
func appendRawField(buf []byte, key string, v json.RawMessage) []byte {
	if len(v) == 0 {
		return buf
	}
	return append(append(buf, key...), v...)
}

// measure counts a request of op that started at start (deferred by the handlers, so the
// count is in before the answer leaves).
func (s *Server) measure(op telemetry.Op, start time.Time) {
	s.Telemetry.Request(op, time.Since(start))
}

func (s *Server) push(ctx *fasthttp.RequestCtx) error {
	defer s.measure(telemetry.Push, time.Now())
	items, err := decodePush(ctx.PostBody())
	if err != nil {
		return err
	}
	if len(items) == 0 {
		writeJSON(ctx, fasthttp.StatusCreated, []pushResultJSON{})
		return nil
	}
	sub, scope := producerSub(ctx), s.scope(ctx)
	out := make([]pushResultJSON, len(items))
	stored := make([]persistence.PushItem, 0, len(items)) // the items with no error of their own
	storedAt := make([]int, 0, len(items))
	for i := range items {
		it := &items[i]
		it.ProducerSub = sub
		if it.Queue, err = queueName(scope, it.sentQueue, "items["+strconv.Itoa(i)+"].queue"); err != nil {
			return err
		}
		out[i] = pushResultJSON{Index: i, QueueName: it.Queue.Name, TransactionID: it.TransactionID}
		if it.BadTrace != "" {
			out[i].Status, out[i].Error = string(persistence.StatusFailed), it.BadTrace
			continue
		}
		stored = append(stored, it.PushItem)
		storedAt = append(storedAt, i)
	}
	res, err := s.Writer.Push(stored)
	if err != nil {
		return err
	}
	for k, r := range res.Items {
		i := storedAt[k]
		it := &items[i]
		switch {
		case r.Buffered:
			out[i].Status, out[i].Queue, out[i].Partition = "buffered", it.Queue.Name, it.Partition
			out[i].TransactionIDCamel = it.TransactionID
		case r.Status == persistence.StatusFailed:
			out[i].Status, out[i].Error = string(r.Status), r.Error
		default:
			out[i].Status, out[i].MessageID = string(r.Status), r.MessageID.String()
			if r.Status == persistence.StatusQueued {
				pid := r.PartitionID.String()
				out[i].PartitionID = jsonString(&pid)
				out[i].TraceID = jsonString(uuidText(it.TraceID))
			}
		}
	}
	// 201 when items went to the disk spool, as the reference answers its synchronous path;
	// 500 when the spool refused items under push maintenance.
	status := fasthttp.StatusOK
	switch {
	case res.SpoolFailed:
		status = fasthttp.StatusInternalServerError
	case res.Buffered:
		status = fasthttp.StatusCreated
	}
	ctx.SetContentType("application/json")
	ctx.SetStatusCode(status)
	setBuiltBody(ctx, 256*len(out), func(b []byte) []byte { return appendPushResults(b, out) })
	return nil
}

// popMessageJSON is one delivered message.
type popMessageJSON struct {
	ConsumerGroup string          `json:"consumerGroup"`
	CreatedAt     string          `json:"createdAt"`
	Data          json.RawMessage `json:"data"`
	ID            string          `json:"id"`
	LeaseID       string          `json:"leaseId"`
	Partition     string          `json:"partition"`
	PartitionID   string          `json:"partitionId"`
	ProducerSub   *string         `json:"producerSub"`
	TraceID       *string         `json:"traceId"`
	TransactionID string          `json:"transactionId"`
}

// popJSON is the pop answer when the pop claimed something, or a long-poll timed out.
type popJSON struct {
	ConsumerGroup      string           `json:"consumerGroup"`
	LeaseID            *string          `json:"leaseId"`
	Messages           []popMessageJSON `json:"messages"`
	Partition          string           `json:"partition"`
	PartitionID        *string          `json:"partitionId"`
	PartitionsClaimed  *int             `json:"partitionsClaimed,omitempty"`
	Paused             bool             `json:"paused,omitempty"`
	Queue              string           `json:"queue"`
	Success            bool             `json:"success"`
	WindowBufferActive bool             `json:"windowBufferActive,omitempty"`
}

// popFailureJSON is the pop answer for no_available_partition, partition_not_found, lease_held.
type popFailureJSON struct {
	Error    string           `json:"error"`
	Messages []popMessageJSON `json:"messages"`
	Success  bool             `json:"success"`
}

// popParams reads the pop query parameters; whole names only, percent-decoded. The caller sets
// the queue.
func (s *Server) popParams(ctx *fasthttp.RequestCtx, partition string) (persistence.PopRequest, bool, time.Duration, error) {
	args := ctx.QueryArgs()
	r := persistence.PopRequest{Partition: partition, Partitions: 1}
	var err error
	if r.Batch, err = intParam(args, "batch", s.Config.DefaultBatchSize, 1, 100000); err != nil {
		return r, false, 0, err
	}
	timeoutMs, err := intParam(args, "timeout", int(s.Config.DefaultTimeout.Milliseconds()), 0, 3600000)
	if err != nil {
		return r, false, 0, err
	}
	wait, err := boolParam(args, "wait", false)
	if err != nil {
		return r, false, 0, err
	}
	if r.AutoAck, err = boolParam(args, "autoAck", false); err != nil {
		return r, false, 0, err
	}
	if partition == "" {
		if r.Partitions, err = intParam(args, "partitions", 1, 1, 1000); err != nil {
			return r, false, 0, err
		}
	}
	if r.Group, err = groupName(string(args.Peek("consumerGroup")), "consumerGroup"); err != nil {
		return r, false, 0, err
	}
	mode := string(args.Peek("subscriptionMode"))
	if mode == "" {
		mode = s.Config.DefaultSubscriptionMode
	}
	// As the reference does, every value but new and new-only reads from the beginning: the
	// JS client sends from_beginning, and other clients send all.
	if mode == "new" || mode == "new-only" {
		r.SubscribeNow = true
	}
	switch from := string(args.Peek("subscriptionFrom")); from {
	case "":
	case "now":
		r.SubscribeNow = true
	default:
		t, perr := time.Parse(time.RFC3339Nano, from)
		if perr != nil {
			return r, false, 0, badf("subscriptionFrom must be now or an RFC 3339 timestamp")
		}
		if !r.SubscribeNow {
			r.SubscribeFrom = &t
		}
	}
	r.LeaseID, _ = uuid.NewV7()
	return r, wait, time.Duration(timeoutMs) * time.Millisecond, nil
}

func intParam(args *fasthttp.Args, name string, def, min, max int) (int, error) {
	if !args.Has(name) {
		return def, nil
	}
	n, err := strconv.Atoi(string(args.Peek(name)))
	if err != nil || n < min || n > max {
		return 0, badf(name + " must be an integer between " + strconv.Itoa(min) + " and " + strconv.Itoa(max))
	}
	return n, nil
}

func boolParam(args *fasthttp.Args, name string, def bool) (bool, error) {
	switch string(args.Peek(name)) {
	case "":
		return def, nil
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, badf(name + " must be true or false")
}

func (s *Server) pop(ctx *fasthttp.RequestCtx) error {
	start, op := time.Now(), telemetry.Pop
	defer func() { s.measure(op, start) }()
	req, wait, timeout, err := s.popParams(ctx, pathParam(ctx, "partition"))
	if err != nil {
		return err
	}
	if wait {
		op = telemetry.PopWait
	}
	queue := pathParam(ctx, "queue")
	if err := checkLen(queue, "queue"); err != nil {
		return err
	}
	if err := checkLen(req.Partition, "partition"); err != nil {
		return err
	}
	if req.Queue, err = queueName(s.scope(ctx), queue, "queue"); err != nil {
		return err
	}
	rep, err := s.popOnce(ctx, req, wait, timeout)
	if err != nil {
		return err
	}
	s.Telemetry.Popped(req.Queue, rep.Result.Messages)
	writePop(ctx, req, rep)
	return nil
}

// popOnce runs one pop through the queue's actor and waits for its answer. Under pop
// maintenance it answers at once without touching the database.
func (s *Server) popOnce(ctx *fasthttp.RequestCtx, req persistence.PopRequest, wait bool, timeout time.Duration) (actors.PopReply, error) {
	if s.Maintenance.Pop() {
		return actors.PopReply{Paused: true}, nil
	}
	reply := make(chan actors.PopReply, 1)
	pr := &actors.PopRequest{Pop: req, Wait: wait, Deadline: time.Now().Add(timeout), Reply: reply}
	if wait {
		gone, stop := watchDisconnect(ctx)
		defer stop()
		pr.Gone = gone
	}
	s.Actors.Pop(pr)
	// The actor answers at the deadline itself; the extra allowance covers database work
	// that started just before it.
	rep, err := await(reply, timeout+s.Config.RequestDeadline)
	if err == nil {
		err = rep.Err
	}
	s.openMessages(req.Queue, rep.Result.Messages)
	return rep, err
}

func writePop(ctx *fasthttp.RequestCtx, req persistence.PopRequest, rep actors.PopReply) {
	res := rep.Result
	if rep.TimedOut || rep.Paused {
		writeJSON(ctx, fasthttp.StatusOK, popJSON{
			ConsumerGroup: req.Group, Messages: []popMessageJSON{}, Partition: req.Partition,
			Queue: req.Queue.Name, Success: true, Paused: rep.Paused,
		})
		return
	}
	switch res.Outcome {
	case persistence.PopNoPartition, persistence.PopPartitionNotFound, persistence.PopLeaseHeld:
		writeJSON(ctx, fasthttp.StatusOK, popFailureJSON{Error: string(res.Outcome), Messages: []popMessageJSON{}})
		return
	case persistence.PopWindowBufferActive:
		empty := ""
		writeJSON(ctx, fasthttp.StatusOK, popJSON{
			ConsumerGroup: req.Group, LeaseID: &empty, Messages: []popMessageJSON{}, Partition: req.Partition,
			Queue: req.Queue.Name, Success: true, WindowBufferActive: true,
		})
		return
	}
	leaseID := req.LeaseID.String()
	if req.AutoAck {
		leaseID = ""
	}
	ctx.SetContentType("application/json")
	ctx.SetStatusCode(fasthttp.StatusOK)
	size := 256
	for _, m := range res.Messages {
		size += 320 + len(m.Payload)
	}
	setBuiltBody(ctx, size, func(b []byte) []byte { return appendPopBody(b, req, res, leaseID) })
}

// popByNamespace serves GET /api/v1/pop?namespace=&task=: a pop from the first queue of that
// namespace and/or task (highest priority first) that has messages. A long-poll then parks on
// every matching queue's actor, like a queue pop, until one of them delivers.
func (s *Server) popByNamespace(ctx *fasthttp.RequestCtx) error {
	start, op := time.Now(), telemetry.Pop
	defer func() { s.measure(op, start) }()
	args := ctx.QueryArgs()
	ns, task := string(args.Peek("namespace")), string(args.Peek("task"))
	if ns == "" && task == "" {
		return badf("namespace or task is required")
	}
	base, wait, timeout, err := s.popParams(ctx, "")
	if err != nil {
		return err
	}
	if wait {
		op = telemetry.PopWait
	}
	deadline := time.Now().Add(timeout)
	c, cancel := s.dbContext()
	queues, err := s.Store.QueuesByNamespace(c, s.scope(ctx), ns, task)
	cancel()
	if err != nil {
		return err
	}
	rep := actors.PopReply{}
	for _, q := range queues {
		req := base
		req.Queue = q
		if rep, err = s.popOnce(ctx, req, false, 0); err != nil || len(rep.Result.Messages) > 0 {
			break
		}
	}
	if err == nil && len(rep.Result.Messages) == 0 && wait {
		rep, err = s.parkByNamespace(ctx, base, queues, deadline)
	}
	if err != nil {
		return err
	}
	s.Telemetry.Popped(rep.Queue, rep.Result.Messages)
	if len(rep.Result.Messages) == 0 {
		writeJSON(ctx, fasthttp.StatusOK, popFailureJSON{Error: string(persistence.PopNoPartition), Messages: []popMessageJSON{}})
		return nil
	}
	base.Queue = rep.Queue
	writePop(ctx, base, rep)
	return nil
}

// parkByNamespace parks a namespace pop that found nothing on each of its queues' actors, tied
// by one actors.OneOf, and waits for the first delivery, or for every actor to give up (the
// deadline, shutdown, pop maintenance, the client going away).
func (s *Server) parkByNamespace(ctx *fasthttp.RequestCtx, base persistence.PopRequest, queues []persistence.QueueName, deadline time.Time) (actors.PopReply, error) {
	gone, stop := watchDisconnect(ctx)
	defer stop()
	if len(queues) == 0 {
		// Nothing to park on, and nothing to find before a queue is configured: wait out the
		// timeout without querying, so a client in a loop does not spin.
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		select {
		case <-gone:
		case <-t.C:
		}
		return actors.PopReply{}, nil
	}
	reply := make(chan actors.PopReply, len(queues))
	one := &actors.OneOf{}
	for _, q := range queues {
		req := base
		req.Queue = q
		s.Actors.Pop(&actors.PopRequest{Pop: req, Wait: true, Checked: true, OneOf: one, Deadline: deadline, Reply: reply, Gone: gone})
	}
	for range queues {
		// The actors answer at the deadline themselves; the allowance covers database work
		// that started just before it.
		rep, err := await(reply, time.Until(deadline)+s.Config.RequestDeadline)
		if err == nil {
			err = rep.Err
		}
		if err != nil || len(rep.Result.Messages) > 0 {
			s.openMessages(rep.Queue, rep.Result.Messages)
			return rep, err
		}
	}
	return actors.PopReply{}, nil
}

// ackResultJSON is one entry of the ack answer.
type ackResultJSON struct {
	DLQ           bool    `json:"dlq"`
	Error         *string `json:"error"`
	Index         int     `json:"index"`
	LeaseReleased bool    `json:"leaseReleased"`
	PartitionName *string `json:"partitionName"`
	QueueName     *string `json:"queueName"`
	Success       bool    `json:"success"`
	TransactionID string  `json:"transactionId"`
}

func (s *Server) ack(ctx *fasthttp.RequestCtx) error {
	defer s.measure(telemetry.Ack, time.Now())
	var raw ackJSON
	if err := parseBody(ctx.PostBody(), &raw); err != nil {
		return err
	}
	item, err := decodeAck(&raw, "", "")
	if err != nil {
		return err
	}
	return s.acknowledge(ctx, []persistence.AckItem{item})
}

func (s *Server) ackBatch(ctx *fasthttp.RequestCtx) error {
	defer s.measure(telemetry.Ack, time.Now())
	items, err := decodeAckBatch(ctx.PostBody())
	if err != nil {
		return err
	}
	if len(items) == 0 {
		writeJSON(ctx, fasthttp.StatusOK, []ackResultJSON{})
		return nil
	}
	return s.acknowledge(ctx, items)
}

// acknowledge submits the acks to the ack batcher, scoped to the caller's tenant, and answers
// with one result per item.
func (s *Server) acknowledge(ctx *fasthttp.RequestCtx, items []persistence.AckItem) error {
	scope := s.scope(ctx)
	for i := range items {
		items[i].Scope = scope
	}
	type reply struct {
		res []persistence.AckResult
		err error
	}
	ch := make(chan reply, 1)
	s.Ack.Submit(fusion.Job[persistence.AckItem, persistence.AckResult]{Items: items, Done: func(r []persistence.AckResult, err error) { ch <- reply{r, err} }})
	rep, err := await(ch, s.Config.RequestDeadline)
	if err == nil {
		err = rep.err
	}
	if err != nil {
		return err
	}
	out := make([]ackResultJSON, len(items))
	var queues []persistence.QueueName // touched by the request, each counted once
	for i, r := range rep.res {
		out[i] = ackResult(i, items[i].TransactionID, r)
		if r.Success {
			s.Telemetry.Acked(r.Queue, items[i].Status != persistence.AckCompleted, r.DLQ)
			if !slices.Contains(queues, r.Queue) {
				queues = append(queues, r.Queue)
				s.Telemetry.AckRequest(r.Queue)
			}
		}
	}
	ctx.SetContentType("application/json")
	ctx.SetStatusCode(fasthttp.StatusOK)
	setBuiltBody(ctx, 160*len(out), func(b []byte) []byte { return appendAckResults(b, out) })
	return nil
}

// appendAckResults appends the answer of an ack batch as encoding/json writes it (a test
// compares the two), by hand as appendPushResults does: json.Marshal of it was 3 % of the
// broker's CPU in the cost cycle.
func appendAckResults(buf []byte, out []ackResultJSON) []byte {
	return appendArray(buf, out, func(buf []byte, r *ackResultJSON) []byte {
		buf = append(buf, `{"dlq":`...)
		buf = strconv.AppendBool(buf, r.DLQ)
		buf = appendNullableString(append(buf, `,"error":`...), r.Error)
		buf = strconv.AppendInt(append(buf, `,"index":`...), int64(r.Index), 10)
		buf = strconv.AppendBool(append(buf, `,"leaseReleased":`...), r.LeaseReleased)
		buf = appendNullableString(append(buf, `,"partitionName":`...), r.PartitionName)
		buf = appendNullableString(append(buf, `,"queueName":`...), r.QueueName)
		buf = strconv.AppendBool(append(buf, `,"success":`...), r.Success)
		return append(appendJSONString(append(buf, `,"transactionId":`...), r.TransactionID), '}')
	})
}

// appendNullableString appends *s as a JSON string, or null.
func appendNullableString(buf []byte, s *string) []byte {
	if s == nil {
		return append(buf, "null"...)
	}
	return appendJSONString(buf, *s)
}

func ackResult(i int, txID string, r persistence.AckResult) ackResultJSON {
	out := ackResultJSON{
		DLQ: r.DLQ, Index: i, LeaseReleased: r.LeaseReleased, Success: r.Success, TransactionID: txID,
		PartitionName: orNull(r.PartitionName),
	}
	if r.Queue != (persistence.QueueName{}) {
		q := r.Queue.Name
		out.QueueName = &q
	}
	if r.Error != "" {
		e := r.Error
		out.Error = &e
	}
	return out
}

// txResultJSON is one entry of the transaction answer: an ack or one pushed item.
type txResultJSON struct {
	DLQ *bool `json:"dlq,omitempty"`
	// Error is on ack results only, null when the ack applied, as the reference sends it.
	Error         json.RawMessage `json:"error,omitempty"`
	Index         int             `json:"index"`
	MessageID     string          `json:"messageId,omitempty"`
	PartitionID   string          `json:"partitionId,omitempty"`
	QueueName     string          `json:"queueName,omitempty"`
	Status        string          `json:"status,omitempty"`
	Success       bool            `json:"success"`
	TransactionID string          `json:"transactionId"`
	Type          string          `json:"type"`
}

type txJSON struct {
	Error         string         `json:"error,omitempty"`
	Results       []txResultJSON `json:"results"`
	Success       bool           `json:"success"`
	TransactionID string         `json:"transactionId"`
}

func (s *Server) transaction(ctx *fasthttp.RequestCtx) error {
	defer s.measure(telemetry.Transaction, time.Now())
	decoded, err := decodeTransaction(ctx.PostBody())
	if err != nil {
		return err
	}
	ops := make([]persistence.TxOp, len(decoded))
	sub, scope := producerSub(ctx), s.scope(ctx)
	for i, op := range decoded {
		if op.ack != nil {
			op.ack.Scope = scope
		}
		ops[i].Ack = op.ack
		for _, it := range op.push {
			it.ProducerSub = sub
			if it.Queue, err = queueName(scope, it.sentQueue, "operations["+strconv.Itoa(i)+"].queue"); err != nil {
				return err
			}
			ops[i].Push = append(ops[i].Push, it.PushItem)
		}
	}
	c, cancel := s.dbContext()
	defer cancel()
	results, reason, err := s.Writer.Transaction(c, ops)
	if err != nil {
		return err
	}
	out := txJSON{Results: []txResultJSON{}, Success: reason == "", Error: reason, TransactionID: uuid.NewString()}
	for i, r := range results {
		if r.Ack != nil {
			a := ackResult(len(out.Results), ops[i].Ack.TransactionID, *r.Ack)
			reason, _ := json.Marshal(a.Error) // null, or the reason
			out.Results = append(out.Results, txResultJSON{
				DLQ: &a.DLQ, Error: reason, Index: a.Index, Success: a.Success, TransactionID: a.TransactionID, Type: "ack",
			})
			continue
		}
		for j, p := range r.Push {
			it := ops[i].Push[j]
			out.Results = append(out.Results, txResultJSON{
				Index: len(out.Results), MessageID: p.MessageID.String(), PartitionID: p.PartitionID.String(),
				QueueName: it.Queue.Name, Status: string(p.Status), Success: p.Status != persistence.StatusFailed,
				TransactionID: it.TransactionID, Type: "push",
			})
		}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type leaseJSON struct {
	Error     *string `json:"error"`
	ExpiresAt *string `json:"expiresAt"`
	Index     int     `json:"index"`
	LeaseID   string  `json:"leaseId"`
	Success   bool    `json:"success"`
}

func (s *Server) extendLease(ctx *fasthttp.RequestCtx) error {
	var req struct {
		Seconds json.RawMessage `json:"seconds"`
	}
	// The Python client's renew sends no body at all: it means the default, as {} does.
	if body := ctx.PostBody(); len(bytes.Trim(body, jsonSpace)) > 0 {
		if err := parseBody(body, &req); err != nil {
			return err
		}
	}
	seconds := 60
	if len(req.Seconds) > 0 && string(req.Seconds) != "null" {
		if err := json.Unmarshal(req.Seconds, &seconds); err != nil || seconds < 1 || seconds > 86400 {
			return badf("seconds must be an integer between 1 and 86400")
		}
	}
	leaseID := pathParam(ctx, "leaseId")
	out := leaseJSON{LeaseID: leaseID}
	id, err := uuid.Parse(leaseID)
	if err != nil {
		msg := "Lease not found"
		out.Error = &msg
		writeJSON(ctx, fasthttp.StatusOK, []leaseJSON{out})
		return nil
	}
	c, cancel := s.dbContext()
	defer cancel()
	r, err := s.Store.ExtendLease(c, s.scope(ctx), id, time.Duration(seconds)*time.Second)
	if err != nil {
		return err
	}
	out.Success = r.Success
	if r.Success {
		out.ExpiresAt = msTimePtr(r.ExpiresAt)
	} else {
		out.Error = &r.Error
	}
	writeJSON(ctx, fasthttp.StatusOK, []leaseJSON{out})
	return nil
}

package http

import (
	"encoding/json"
	"time"

	"github.com/valyala/fasthttp"

	"queen/persistence"
)

// groupPath reads the consumer group path parameter; __QUEUE_MODE__ is a group like any other.
func groupPath(ctx *fasthttp.RequestCtx) (string, error) {
	g := pathParam(ctx, "group")
	return g, checkLen(g, "consumerGroup")
}

type consumerGroupJSON struct {
	MaxTimeLag            int64    `json:"maxTimeLag"`
	Members               int64    `json:"members"`
	Name                  string   `json:"name"`
	PartitionsWithLag     int64    `json:"partitionsWithLag"`
	QueueName             string   `json:"queueName"`
	State                 string   `json:"state"`
	SubscriptionCreatedAt *string  `json:"subscriptionCreatedAt"`
	SubscriptionMode      *string  `json:"subscriptionMode"`
	SubscriptionTimestamp *string  `json:"subscriptionTimestamp"`
	Topics                []string `json:"topics"`
	TotalLag              int64    `json:"totalLag"`
}

func (s *Server) listConsumerGroups(ctx *fasthttp.RequestCtx) error {
	c, cancel := s.dbContext()
	defer cancel()
	groups, err := s.Store.ListConsumerGroups(c, s.scope(ctx))
	if err != nil {
		return err
	}
	out := make([]consumerGroupJSON, len(groups))
	for i, g := range groups {
		out[i] = consumerGroupJSON{
			MaxTimeLag: g.MaxTimeLag, Members: g.Members, Name: g.Name, PartitionsWithLag: g.PartitionsWithLag,
			QueueName: g.Queue.Name, State: string(g.State()), SubscriptionCreatedAt: msTimePtr(g.SubscriptionCreatedAt),
			SubscriptionMode: g.SubscriptionMode, SubscriptionTimestamp: msTimePtr(g.SubscriptionTimestamp),
			Topics: []string{g.Queue.Name}, TotalLag: g.TotalLag,
		}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type groupPartitionJSON struct {
	LeaseActive    bool    `json:"leaseActive"`
	LastConsumedAt *string `json:"lastConsumedAt"`
	OffsetLag      int64   `json:"offsetLag"`
	Partition      string  `json:"partition"`
	TimeLagSeconds int64   `json:"timeLagSeconds"`
	TotalConsumed  int64   `json:"totalConsumed"`
	WorkerID       *string `json:"workerId"`
}

type groupQueueJSON struct {
	Partitions []groupPartitionJSON `json:"partitions"`
}

func (s *Server) getConsumerGroup(ctx *fasthttp.RequestCtx) error {
	group, err := groupPath(ctx)
	if err != nil {
		return err
	}
	c, cancel := s.dbContext()
	defer cancel()
	parts, queues, err := s.Store.ConsumerGroup(c, s.scope(ctx), group)
	if err != nil {
		return err
	}
	if len(queues) == 0 {
		return notFoundf("Consumer group not found")
	}
	out := make(map[string]*groupQueueJSON, len(queues))
	for _, q := range queues {
		out[q.Name] = &groupQueueJSON{Partitions: []groupPartitionJSON{}}
	}
	for _, p := range parts {
		q := out[p.Queue.Name]
		q.Partitions = append(q.Partitions, groupPartitionJSON{
			LeaseActive: p.LeaseActive, LastConsumedAt: msTimePtr(p.LastConsumedAt), OffsetLag: p.OffsetLag,
			Partition: p.Partition, TimeLagSeconds: p.TimeLagSeconds, TotalConsumed: p.TotalConsumed,
			WorkerID: uuidText(p.WorkerID),
		})
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type deleteGroupJSON struct {
	ConsumerGroup     string `json:"consumerGroup"`
	DeletedPartitions int64  `json:"deletedPartitions"`
	MetadataDeleted   bool   `json:"metadataDeleted"`
	QueueName         string `json:"queueName,omitempty"`
	Success           bool   `json:"success"`
}

func (s *Server) deleteConsumerGroup(ctx *fasthttp.RequestCtx) error {
	return s.deleteGroup(ctx, persistence.QueueName{})
}

func (s *Server) deleteConsumerGroupQueue(ctx *fasthttp.RequestCtx) error {
	queue, err := queueName(s.scope(ctx), pathParam(ctx, "queue"), "queue")
	if err != nil {
		return err
	}
	return s.deleteGroup(ctx, queue)
}

// deleteGroup deletes a group's cursors (on queue only, when not the zero QueueName). Parked
// pops of the group now have history to read again, so the queues are woken.
func (s *Server) deleteGroup(ctx *fasthttp.RequestCtx, queue persistence.QueueName) error {
	group, err := groupPath(ctx)
	if err != nil {
		return err
	}
	deleteMetadata, err := boolParam(ctx.QueryArgs(), "deleteMetadata", true)
	if err != nil {
		return err
	}
	c, cancel := s.dbContext()
	defer cancel()
	d, err := s.Writer.DeleteConsumerGroup(c, s.scope(ctx), group, queue, deleteMetadata)
	if err != nil {
		return err
	}
	writeJSON(ctx, fasthttp.StatusOK, deleteGroupJSON{
		ConsumerGroup: group, DeletedPartitions: d.Partitions, MetadataDeleted: deleteMetadata, QueueName: queue.Name, Success: true,
	})
	return nil
}

// rfc3339Field reads a required RFC 3339 timestamp string.
func rfc3339Field(raw json.RawMessage, name string) (time.Time, error) {
	s, err := stringField(raw, name, "")
	if err != nil || s == "" {
		return time.Time{}, badf(name + " must be an RFC 3339 timestamp string")
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, badf(name + " must be an RFC 3339 timestamp string")
	}
	return t, nil
}

type subscriptionJSON struct {
	ConsumerGroup string `json:"consumerGroup"`
	NewTimestamp  string `json:"newTimestamp"`
	RowsUpdated   int64  `json:"rowsUpdated"`
	Success       bool   `json:"success"`
}

func (s *Server) updateSubscription(ctx *fasthttp.RequestCtx) error {
	group, err := groupPath(ctx)
	if err != nil {
		return err
	}
	var req struct {
		SubscriptionTimestamp json.RawMessage `json:"subscriptionTimestamp"`
	}
	if err := parseBody(ctx.PostBody(), &req); err != nil {
		return err
	}
	if len(req.SubscriptionTimestamp) == 0 || string(req.SubscriptionTimestamp) == "null" {
		return badf("Missing subscriptionTimestamp in request body")
	}
	ts, err := rfc3339Field(req.SubscriptionTimestamp, "subscriptionTimestamp")
	if err != nil {
		return err
	}
	c, cancel := s.dbContext()
	defer cancel()
	n, err := s.Store.UpdateSubscription(c, s.scope(ctx), group, ts)
	if err != nil {
		return err
	}
	writeJSON(ctx, fasthttp.StatusOK, subscriptionJSON{ConsumerGroup: group, NewTimestamp: msTime(ts), RowsUpdated: n, Success: true})
	return nil
}

type seekQueueJSON struct {
	ConsumerGroup     string  `json:"consumerGroup"`
	PartitionsUpdated int64   `json:"partitionsUpdated"`
	QueueName         string  `json:"queueName"`
	SeekToEnd         bool    `json:"seekToEnd"`
	Success           bool    `json:"success"`
	TargetTimestamp   *string `json:"targetTimestamp"`
}

// seekQueue moves the group's cursors on the queue to the end or to a timestamp, then wakes
// the queue: a backward seek gives parked pops messages to read again.
func (s *Server) seekQueue(ctx *fasthttp.RequestCtx) error {
	group, err := groupPath(ctx)
	if err != nil {
		return err
	}
	queue, err := queueName(s.scope(ctx), pathParam(ctx, "queue"), "queue")
	if err != nil {
		return err
	}
	var req struct {
		ToEnd     json.RawMessage `json:"toEnd"`
		Timestamp json.RawMessage `json:"timestamp"`
	}
	if err := parseBody(ctx.PostBody(), &req); err != nil {
		return err
	}
	toEnd, err := boolOption(req.ToEnd, "toEnd")
	if err != nil {
		return badf("toEnd must be a boolean")
	}
	out := seekQueueJSON{ConsumerGroup: group, QueueName: queue.Name, Success: true}
	var target *time.Time
	switch {
	case toEnd != nil && *toEnd:
		out.SeekToEnd = true
	case len(req.Timestamp) > 0 && string(req.Timestamp) != "null":
		ts, err := rfc3339Field(req.Timestamp, "timestamp")
		if err != nil {
			return err
		}
		target = &ts
		text := msTime(ts)
		out.TargetTimestamp = &text
	default:
		return badf("Must specify either 'toEnd': true or 'timestamp'")
	}
	c, cancel := s.dbContext()
	defer cancel()
	if out.PartitionsUpdated, err = s.Writer.SeekQueue(c, group, queue, target); err != nil {
		return err
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type seekPartitionJSON struct {
	ConsumerGroup string  `json:"consumerGroup"`
	CursorMovedTo *string `json:"cursorMovedTo"`
	PartitionName string  `json:"partitionName"`
	QueueName     string  `json:"queueName"`
	Success       bool    `json:"success"`
	Updated       bool    `json:"updated"`
}

type seekFailureJSON struct {
	Error   string `json:"error"`
	Success bool   `json:"success"`
}

// seekPartition moves the group's cursor on one partition to its newest message; the body, if
// any, is ignored.
func (s *Server) seekPartition(ctx *fasthttp.RequestCtx) error {
	group, err := groupPath(ctx)
	if err != nil {
		return err
	}
	partition := pathParam(ctx, "partition")
	if err := checkLen(partition, "partition"); err != nil {
		return err
	}
	queue, err := queueName(s.scope(ctx), pathParam(ctx, "queue"), "queue")
	if err != nil {
		return err
	}
	c, cancel := s.dbContext()
	defer cancel()
	movedTo, found, err := s.Store.SeekPartition(c, group, queue, partition)
	if err != nil {
		return err
	}
	if !found {
		writeJSON(ctx, fasthttp.StatusNotFound, seekFailureJSON{Error: "Partition not found"})
		return nil
	}
	writeJSON(ctx, fasthttp.StatusOK, seekPartitionJSON{
		ConsumerGroup: group, CursorMovedTo: msTimePtr(movedTo), PartitionName: partition, QueueName: queue.Name,
		Success: true, Updated: true,
	})
	return nil
}

type laggingJSON struct {
	ConsumerGroup      string  `json:"consumer_group"`
	LagHours           float64 `json:"lag_hours"`
	LastConsumedAt     *string `json:"last_consumed_at"`
	OffsetLag          int64   `json:"offset_lag"`
	OldestUnconsumedAt string  `json:"oldest_unconsumed_at"`
	PartitionID        string  `json:"partition_id"`
	PartitionName      string  `json:"partition_name"`
	QueueName          string  `json:"queue_name"`
	TimeLagSeconds     int64   `json:"time_lag_seconds"`
	WorkerID           *string `json:"worker_id"`
}

// laggingGroups serves GET /api/v1/consumer-groups/lagging?minLagSeconds=3600.
func (s *Server) laggingGroups(ctx *fasthttp.RequestCtx) error {
	minLag, err := intParam(ctx.QueryArgs(), "minLagSeconds", 3600, 0, 100*365*86400)
	if err != nil {
		return err
	}
	c, cancel := s.dbContext()
	defer cancel()
	rows, err := s.Store.LaggingPartitions(c, s.scope(ctx), time.Duration(minLag)*time.Second)
	if err != nil {
		return err
	}
	out := make([]laggingJSON, len(rows))
	for i, l := range rows {
		out[i] = laggingJSON{
			ConsumerGroup: l.Group, LagHours: float64(l.TimeLagSeconds) / 3600, LastConsumedAt: msTimePtr(l.LastConsumedAt),
			OffsetLag: l.OffsetLag, OldestUnconsumedAt: msTime(l.OldestUnconsumedAt),
			PartitionID: l.PartitionID.String(), PartitionName: l.Partition, QueueName: l.Queue.Name,
			TimeLagSeconds: l.TimeLagSeconds, WorkerID: uuidText(l.LeaseID),
		}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

package http

import (
	"encoding/json"
	"errors"

	"github.com/valyala/fasthttp"

	"queen/persistence"
)

type busStatusJSON struct {
	ConsumedBy  int64 `json:"consumedBy"`
	TotalGroups int64 `json:"totalGroups"`
}

type messageJSON struct {
	BusStatus      busStatusJSON `json:"busStatus"`
	CreatedAt      string        `json:"createdAt"`
	ID             string        `json:"id"`
	LeaseExpiresAt *string       `json:"leaseExpiresAt"`
	Namespace      string        `json:"namespace"`
	Partition      string        `json:"partition"`
	PartitionID    string        `json:"partitionId"`
	ProducerSub    *string       `json:"producerSub"`
	Queue          string        `json:"queue"`
	QueuePath      string        `json:"queuePath"`
	QueuePriority  int           `json:"queuePriority"`
	QueueStatus    string        `json:"queueStatus"`
	Status         string        `json:"status"`
	Task           string        `json:"task"`
	TraceID        *string       `json:"traceId"`
	TransactionID  string        `json:"transactionId"`
}

type modeJSON struct {
	BusGroupsCount int64  `json:"busGroupsCount"`
	HasQueueMode   bool   `json:"hasQueueMode"`
	Type           string `json:"type"`
}

type messageListJSON struct {
	Messages []messageJSON `json:"messages"`
	Mode     modeJSON      `json:"mode"`
}

func messageInfoJSON(m *persistence.MessageInfo) messageJSON {
	return messageJSON{
		BusStatus:      busStatusJSON{ConsumedBy: m.ConsumedBy, TotalGroups: m.BusGroups},
		CreatedAt:      msTime(m.CreatedAt),
		ID:             m.ID.String(),
		LeaseExpiresAt: msTimePtr(m.LeaseExpiresAt),
		Namespace:      m.Namespace,
		Partition:      m.Partition,
		PartitionID:    m.PartitionID.String(),
		ProducerSub:    orNull(m.ProducerSub),
		Queue:          m.Queue.Name,
		QueuePath:      m.Queue.Name + "/" + m.Partition,
		QueuePriority:  m.QueuePriority,
		QueueStatus:    string(m.Status),
		Status:         string(m.Status),
		Task:           m.Task,
		TraceID:        uuidText(m.TraceID),
		TransactionID:  m.TransactionID,
	}
}

// messageFilter reads the message browser's query parameters for a caller in scope. Without
// from and to the window is the last hour, by the database's clock.
func messageFilter(args *fasthttp.Args, scope persistence.Scope) (persistence.MessageFilter, error) {
	f := persistence.MessageFilter{
		Scope: scope, Partition: string(args.Peek("partition")),
		Namespace: string(args.Peek("ns")), Task: string(args.Peek("task")),
		Status: persistence.MessageStatus(args.Peek("status")),
	}
	switch f.Status {
	case "", persistence.MessagePending, persistence.MessageProcessing, persistence.MessageCompleted, persistence.MessageDeadLetter:
	default:
		return f, badf("status must be one of pending, processing, completed, dead_letter")
	}
	var err error
	if f.From, err = timeParam(args, "from"); err != nil {
		return f, err
	}
	if f.To, err = timeParam(args, "to"); err != nil {
		return f, err
	}
	if f.Limit, f.Offset, err = pageParams(args, 200); err != nil {
		return f, err
	}
	if queue := string(args.Peek("queue")); queue != "" {
		f.Queue, err = queueName(scope, queue, "queue")
	}
	return f, err
}

func (s *Server) listMessages(ctx *fasthttp.RequestCtx) error {
	f, err := messageFilter(ctx.QueryArgs(), s.scope(ctx))
	if err != nil {
		return err
	}
	c, cancel := s.dbContext()
	defer cancel()
	msgs, mode, err := s.Store.ListMessages(c, f)
	if err != nil {
		return err
	}
	out := messageListJSON{
		Messages: make([]messageJSON, len(msgs)),
		Mode:     modeJSON{BusGroupsCount: mode.BusGroups, HasQueueMode: mode.HasQueueMode, Type: mode.Type()},
	}
	for i := range msgs {
		out.Messages[i] = messageInfoJSON(&msgs[i])
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type groupPositionJSON struct {
	Consumed       bool    `json:"consumed"`
	LeaseExpiresAt *string `json:"leaseExpiresAt"`
	Name           string  `json:"name"`
}

type messageModeJSON struct {
	BusGroupsCount   int64  `json:"busGroupsCount"`
	ConsumedByGroups int64  `json:"consumedByGroups"`
	HasQueueMode     bool   `json:"hasQueueMode"`
	Type             string `json:"type"`
}

type queueConfigJSON struct {
	LeaseTime  int `json:"leaseTime"`
	Priority   int `json:"priority"`
	RetryDelay int `json:"retryDelay"`
	RetryLimit int `json:"retryLimit"`
	TTL        int `json:"ttl"`
}

type messageDetailJSON struct {
	ConsumerGroups []groupPositionJSON `json:"consumerGroups"`
	CreatedAt      string              `json:"createdAt"`
	ErrorMessage   *string             `json:"errorMessage"`
	ID             string              `json:"id"`
	IsEncrypted    bool                `json:"isEncrypted"`
	LeaseExpiresAt *string             `json:"leaseExpiresAt"`
	Mode           messageModeJSON     `json:"mode"`
	Namespace      string              `json:"namespace"`
	Partition      string              `json:"partition"`
	PartitionID    string              `json:"partitionId"`
	Payload        json.RawMessage     `json:"payload"`
	ProducerSub    *string             `json:"producerSub"`
	Queue          string              `json:"queue"`
	QueueConfig    queueConfigJSON     `json:"queueConfig"`
	QueuePath      string              `json:"queuePath"`
	RetryCount     *int32              `json:"retryCount"`
	Status         string              `json:"status"`
	Task           string              `json:"task"`
	TraceID        *string             `json:"traceId"`
	TransactionID  string              `json:"transactionId"`
}

func (s *Server) getMessage(ctx *fasthttp.RequestCtx) error {
	pid, err := uuidPath(ctx, "partitionId")
	if err != nil {
		return err
	}
	txID := pathParam(ctx, "transactionId")
	c, cancel := s.dbContext()
	defer cancel()
	m, err := s.Store.Message(c, pid, txID)
	if err != nil {
		return err
	}
	if m == nil || !s.scope(ctx).Owns(m.Queue) {
		return notFoundf("Message not found")
	}
	info := messageInfoJSON(&m.MessageInfo)
	mode := persistence.ConsumptionMode{HasQueueMode: m.HasQueueMode, BusGroups: m.BusGroups}
	out := messageDetailJSON{
		ConsumerGroups: make([]groupPositionJSON, len(m.Groups)),
		CreatedAt:      info.CreatedAt,
		ErrorMessage:   m.ErrorMessage,
		ID:             info.ID,
		IsEncrypted:    m.Encrypted,
		LeaseExpiresAt: info.LeaseExpiresAt,
		Mode: messageModeJSON{
			BusGroupsCount: m.BusGroups, ConsumedByGroups: m.ConsumedBy, HasQueueMode: m.HasQueueMode, Type: mode.Type(),
		},
		Namespace:   info.Namespace,
		Partition:   info.Partition,
		PartitionID: info.PartitionID,
		Payload:     s.openPayload(m.Payload, m.Encrypted, m.Queue, m.TransactionID),
		ProducerSub: info.ProducerSub,
		Queue:       info.Queue,
		QueueConfig: queueConfigJSON{
			LeaseTime: m.LeaseTime, Priority: m.QueuePriority, RetryDelay: m.RetryDelay, RetryLimit: m.RetryLimit, TTL: m.TTL,
		},
		QueuePath:     info.QueuePath,
		Status:        info.Status,
		Task:          info.Task,
		TraceID:       info.TraceID,
		TransactionID: info.TransactionID,
	}
	out.RetryCount = m.RetryCount
	for i, g := range m.Groups {
		out.ConsumerGroups[i] = groupPositionJSON{Consumed: g.Consumed, LeaseExpiresAt: msTimePtr(g.LeaseExpiresAt), Name: g.Name}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type deleteMessageJSON struct {
	Message       string `json:"message"`
	PartitionID   string `json:"partitionId"`
	Success       bool   `json:"success"`
	TransactionID string `json:"transactionId"`
}

func (s *Server) deleteMessage(ctx *fasthttp.RequestCtx) error {
	pid, err := uuidPath(ctx, "partitionId")
	if err != nil {
		return err
	}
	txID := pathParam(ctx, "transactionId")
	c, cancel := s.dbContext()
	defer cancel()
	if s.Config.TenancyHeader {
		// Another tenant's message is not found (one more read, with tenancy on only).
		m, err := s.Store.Message(c, pid, txID)
		if err != nil {
			return err
		}
		if m == nil || !s.scope(ctx).Owns(m.Queue) {
			writeJSON(ctx, fasthttp.StatusOK, deleteMessageJSON{Message: "Message not found", PartitionID: pid.String(), TransactionID: txID})
			return nil
		}
	}
	deleted, err := s.Store.DeleteMessage(c, pid, txID)
	if err != nil {
		return err
	}
	out := deleteMessageJSON{Message: "Message deleted successfully", PartitionID: pid.String(), Success: true, TransactionID: txID}
	if !deleted {
		// 200: the clients read success, as with the reference.
		out.Message, out.Success = "Message not found", false
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type dlqEntryJSON struct {
	ConsumerGroup string          `json:"consumerGroup"`
	CreatedAt     string          `json:"createdAt"`
	Data          json.RawMessage `json:"data"`
	ErrorMessage  *string         `json:"errorMessage"`
	FailedAt      string          `json:"failedAt"`
	ID            string          `json:"id"`
	Partition     string          `json:"partition"`
	PartitionID   string          `json:"partitionId"`
	ProducerSub   *string         `json:"producerSub"`
	Queue         string          `json:"queue"`
	RetryCount    int             `json:"retryCount"`
	TransactionID string          `json:"transactionId"`
}

type dlqListJSON struct {
	Messages   []dlqEntryJSON `json:"messages"`
	Pagination paginationJSON `json:"pagination"`
	Total      int64          `json:"total"`
}

func (s *Server) listDLQ(ctx *fasthttp.RequestCtx) error {
	args := ctx.QueryArgs()
	f := persistence.DLQFilter{
		Scope: s.scope(ctx), Group: string(args.Peek("consumerGroup")), Partition: string(args.Peek("partition")),
	}
	var err error
	if queue := string(args.Peek("queue")); queue != "" {
		if f.Queue, err = queueName(f.Scope, queue, "queue"); err != nil {
			return err
		}
	}
	if f.From, err = timeParam(args, "from"); err != nil {
		return err
	}
	if f.To, err = timeParam(args, "to"); err != nil {
		return err
	}
	if f.Limit, f.Offset, err = pageParams(args, 100); err != nil {
		return err
	}
	c, cancel := s.dbContext()
	defer cancel()
	entries, total, err := s.Store.ListDLQ(c, f)
	if err != nil {
		return err
	}
	out := dlqListJSON{
		Messages: make([]dlqEntryJSON, len(entries)), Pagination: paginationJSON{Limit: f.Limit, Offset: f.Offset}, Total: total,
	}
	for i, e := range entries {
		out.Messages[i] = dlqEntryJSON{
			ConsumerGroup: e.Group, CreatedAt: msTime(e.CreatedAt), Data: s.openPayload(e.Payload, e.Encrypted, e.Queue, e.TransactionID), ErrorMessage: e.Error,
			FailedAt: msTime(e.FailedAt), ID: e.MessageID.String(), Partition: e.Partition, PartitionID: e.PartitionID.String(),
			ProducerSub: orNull(e.ProducerSub), Queue: e.Queue.Name, RetryCount: e.RetryCount, TransactionID: e.TransactionID,
		}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type dlqReplayJSON struct {
	MessageID     string `json:"messageId"`
	Partition     string `json:"partition"`
	PartitionID   string `json:"partitionId"`
	Queue         string `json:"queue"`
	ReplayedFrom  string `json:"replayedFrom"`
	Status        string `json:"status"`
	Success       bool   `json:"success"`
	TransactionID string `json:"transactionId"`
}

// replayDLQ serves POST /api/v1/dlq/{partitionId}/{transactionId}/replay, an addition to the
// reference (docs/compat.md): a copy of the dead letter is pushed into its queue and partition
// and its dead-letter entries are removed, in one transaction; the body, if any, is ignored.
func (s *Server) replayDLQ(ctx *fasthttp.RequestCtx) error {
	pid, err := uuidPath(ctx, "partitionId")
	if err != nil {
		return err
	}
	txID := pathParam(ctx, "transactionId")
	c, cancel := s.dbContext()
	defer cancel()
	r, err := s.Writer.ReplayDeadLetter(c, s.scope(ctx), pid, txID)
	if errors.Is(err, persistence.ErrSealedPayload) || errors.Is(err, persistence.ErrReplayRefused) {
		return conflictf(err.Error())
	}
	if err != nil {
		return err
	}
	if !r.Found {
		return notFoundf("Dead letter not found")
	}
	writeJSON(ctx, fasthttp.StatusOK, dlqReplayJSON{
		MessageID: r.Result.MessageID.String(), Partition: r.Partition, PartitionID: r.Result.PartitionID.String(),
		Queue: r.Queue.Name, ReplayedFrom: txID, Status: string(r.Result.Status), Success: true, TransactionID: r.TransactionID,
	})
	return nil
}

package http

import (
	"encoding/json"

	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"queen/persistence"
)

// decodeTrace validates a trace body; the worker id is the caller's.
func decodeTrace(body []byte) (persistence.TraceRecord, error) {
	var r persistence.TraceRecord
	var req struct {
		TransactionID json.RawMessage `json:"transactionId"`
		PartitionID   json.RawMessage `json:"partitionId"`
		ConsumerGroup json.RawMessage `json:"consumerGroup"`
		EventType     json.RawMessage `json:"eventType"`
		TraceNames    json.RawMessage `json:"traceNames"`
		Data          json.RawMessage `json:"data"`
	}
	if err := parseBody(body, &req); err != nil {
		return r, err
	}
	txID, err1 := stringField(req.TransactionID, "transactionId", "")
	pid, err2 := stringField(req.PartitionID, "partitionId", "")
	if err1 != nil || err2 != nil || txID == "" || pid == "" {
		return r, badf("transactionId and partitionId are required")
	}
	var err error
	if r.PartitionID, err = uuid.Parse(pid); err != nil {
		return r, badf("partitionId must be a UUID")
	}
	r.TransactionID = txID
	if len(req.Data) == 0 || string(req.Data) == "null" {
		return r, badf("data is required")
	}
	if r.Data, err = sanitizePayload(req.Data, "data"); err != nil {
		return r, err
	}
	group, err := stringField(req.ConsumerGroup, "consumerGroup", "")
	if err != nil {
		return r, err
	}
	if r.Group, err = groupName(group, "consumerGroup"); err != nil {
		return r, err
	}
	if r.EventType, err = stringField(req.EventType, "eventType", "info"); err != nil {
		return r, err
	}
	if r.EventType == "" {
		r.EventType = "info"
	}
	r.Names, err = decodeTraceNames(req.TraceNames)
	return r, err
}

// decodeTraceNames reads traceNames: a string, an array of strings, or null. Empty names are dropped.
func decodeTraceNames(raw json.RawMessage) ([]string, error) {
	var names []string
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return []string{}, nil
	case raw[0] == '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, badf("traceNames must be a string or an array of strings")
		}
		names = []string{s}
	case raw[0] == '[':
		if json.Unmarshal(raw, &names) != nil {
			return nil, badf("traceNames must be a string or an array of strings")
		}
	default:
		return nil, badf("traceNames must be a string or an array of strings")
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		if n == "" {
			continue
		}
		if err := checkLen(n, "traceNames"); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

type recordTraceJSON struct {
	Error   string `json:"error,omitempty"`
	Success bool   `json:"success"`
	TraceID string `json:"traceId,omitempty"`
}

func (s *Server) recordTrace(ctx *fasthttp.RequestCtx) error {
	r, err := decodeTrace(ctx.PostBody())
	if err != nil {
		return err
	}
	r.WorkerID = s.Config.ServerID
	c, cancel := s.dbContext()
	defer cancel()
	id, ok, err := s.Store.RecordTrace(c, s.scope(ctx), r)
	if err != nil {
		return err
	}
	if !ok {
		writeJSON(ctx, fasthttp.StatusOK, recordTraceJSON{Error: "Message not found"})
		return nil
	}
	writeJSON(ctx, fasthttp.StatusOK, recordTraceJSON{Success: true, TraceID: id.String()})
	return nil
}

type traceJSON struct {
	ConsumerGroup string          `json:"consumer_group"`
	CreatedAt     string          `json:"created_at"`
	Data          json.RawMessage `json:"data"`
	EventType     string          `json:"event_type"`
	ID            string          `json:"id"`
	TraceNames    []string        `json:"trace_names"`
	WorkerID      *string         `json:"worker_id"`
}

func traceOut(t *persistence.Trace) traceJSON {
	names := t.Names
	if names == nil {
		names = []string{}
	}
	return traceJSON{
		ConsumerGroup: t.Group, CreatedAt: msTime(t.CreatedAt), Data: t.Data, EventType: t.EventType,
		ID: t.ID.String(), TraceNames: names, WorkerID: t.WorkerID,
	}
}

type messageTracesJSON struct {
	Traces []traceJSON `json:"traces"`
}

func (s *Server) messageTraces(ctx *fasthttp.RequestCtx) error {
	pid, err := uuidPath(ctx, "partitionId")
	if err != nil {
		return err
	}
	c, cancel := s.dbContext()
	defer cancel()
	traces, err := s.Store.MessageTraces(c, s.scope(ctx), pid, pathParam(ctx, "transactionId"))
	if err != nil {
		return err
	}
	out := messageTracesJSON{Traces: make([]traceJSON, len(traces))}
	for i := range traces {
		out.Traces[i] = traceOut(&traces[i])
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type namedTraceJSON struct {
	ConsumerGroup  string          `json:"consumer_group"`
	CreatedAt      string          `json:"created_at"`
	Data           json.RawMessage `json:"data"`
	EventType      string          `json:"event_type"`
	ID             string          `json:"id"`
	MessagePayload json.RawMessage `json:"message_payload"`
	PartitionID    string          `json:"partition_id"`
	PartitionName  string          `json:"partition_name"`
	QueueName      string          `json:"queue_name"`
	TraceNames     []string        `json:"trace_names"`
	TransactionID  string          `json:"transaction_id"`
	WorkerID       *string         `json:"worker_id"`
}

type tracesByNameJSON struct {
	Pagination paginationJSON   `json:"pagination"`
	Total      int64            `json:"total"`
	Traces     []namedTraceJSON `json:"traces"`
}

func (s *Server) tracesByName(ctx *fasthttp.RequestCtx) error {
	name := pathParam(ctx, "traceName")
	limit, offset, err := pageParams(ctx.QueryArgs(), 100)
	if err != nil {
		return err
	}
	c, cancel := s.dbContext()
	defer cancel()
	traces, total, err := s.Store.TracesByName(c, s.scope(ctx), name, limit, offset)
	if err != nil {
		return err
	}
	out := tracesByNameJSON{Pagination: paginationJSON{Limit: limit, Offset: offset}, Total: total, Traces: make([]namedTraceJSON, len(traces))}
	for i := range traces {
		t := &traces[i]
		base := traceOut(&t.Trace)
		out.Traces[i] = namedTraceJSON{
			ConsumerGroup: base.ConsumerGroup, CreatedAt: base.CreatedAt, Data: base.Data, EventType: base.EventType,
			ID: base.ID, MessagePayload: s.openPayload(t.Payload, t.Encrypted, t.Queue, t.TransactionID), PartitionID: t.PartitionID.String(), PartitionName: t.Partition,
			QueueName: t.Queue.Name, TraceNames: base.TraceNames, TransactionID: t.TransactionID, WorkerID: base.WorkerID,
		}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

type traceNameJSON struct {
	LastSeen     string `json:"last_seen"`
	MessageCount int64  `json:"message_count"`
	TraceCount   int64  `json:"trace_count"`
	TraceName    string `json:"trace_name"`
}

type traceNamesJSON struct {
	Pagination paginationJSON  `json:"pagination"`
	Total      int64           `json:"total"`
	TraceNames []traceNameJSON `json:"trace_names"`
}

func (s *Server) traceNames(ctx *fasthttp.RequestCtx) error {
	limit, offset, err := pageParams(ctx.QueryArgs(), 50)
	if err != nil {
		return err
	}
	c, cancel := s.dbContext()
	defer cancel()
	names, total, err := s.Store.TraceNames(c, s.scope(ctx), limit, offset)
	if err != nil {
		return err
	}
	out := traceNamesJSON{Pagination: paginationJSON{Limit: limit, Offset: offset}, Total: total, TraceNames: make([]traceNameJSON, len(names))}
	for i, n := range names {
		out.TraceNames[i] = traceNameJSON{LastSeen: msTime(n.LastSeen), MessageCount: n.Messages, TraceCount: n.Traces, TraceName: n.Name}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

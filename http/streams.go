package http

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"queen/persistence"
	"queen/telemetry"
)

// The routes of the streaming SDKs (docs/streams.md): register a query, commit a cycle, read
// state, and, an addition, delete a query with its state.

// maxStateKey bounds a state key, in bytes: it is part of the state table's primary key, whose
// index entries PostgreSQL caps at about 2.7 kB.
const maxStateKey = 1024

// streamError is the error answer of the streams routes: the reference's success:false shape,
// which both SDKs read, with the status of the failure.
type streamError struct {
	Success bool   `json:"success"`
	Error   string `json:"error"`
}

// streamAnswer answers the bad input of a streams route 400 in the streams' shape; any other
// error is answered as on every route (a generic 500 without database text, 503 when PostgreSQL
// is away).
func streamAnswer(h handler) handler {
	return func(ctx *fasthttp.RequestCtx) error {
		err := h(ctx)
		var bad *badRequest
		if errors.As(err, &bad) {
			writeJSON(ctx, fasthttp.StatusBadRequest, streamError{Error: bad.msg})
			return nil
		}
		return err
	}
}

// registerQueryJSON is the body of POST /streams/v1/queries as it arrives.
type registerQueryJSON struct {
	Name        json.RawMessage `json:"name"`
	SourceQueue json.RawMessage `json:"source_queue"`
	SinkQueue   json.RawMessage `json:"sink_queue"`
	ConfigHash  json.RawMessage `json:"config_hash"`
	Reset       json.RawMessage `json:"reset"`
}

// registerQuery is a validated registration; the names are the caller's, not yet in a tenant.
type registerQuery struct {
	name, source, sink, hash string
	reset                    bool
}

func decodeRegisterQuery(body []byte) (registerQuery, error) {
	var raw registerQueryJSON
	var q registerQuery
	if err := parseBody(body, &raw); err != nil {
		return q, err
	}
	var err error
	if q.name, err = nameField(raw.Name, "name"); err != nil {
		return q, err
	}
	if q.source, err = nameField(raw.SourceQueue, "source_queue"); err != nil {
		return q, err
	}
	if q.sink, err = stringField(raw.SinkQueue, "sink_queue", ""); err != nil {
		return q, err
	}
	if err = checkLen(q.sink, "sink_queue"); err != nil {
		return q, err
	}
	if q.hash, err = nameField(raw.ConfigHash, "config_hash"); err != nil {
		return q, err
	}
	q.reset, err = boolField(raw.Reset, "reset", false)
	return q, err
}

// boolField decodes an optional JSON boolean; absent or null leaves def.
func boolField(raw json.RawMessage, name string, def bool) (bool, error) {
	switch string(raw) {
	case "", "null":
		return def, nil
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, badf(name + " must be a boolean")
}

type registeredQueryJSON struct {
	ConfigHash string `json:"config_hash"`
	Error      string `json:"error,omitempty"`
	Fresh      *bool  `json:"fresh,omitempty"`
	Name       string `json:"name"`
	QueryID    string `json:"query_id"`
	Reset      *bool  `json:"reset,omitempty"`
	Success    bool   `json:"success"`
}

// registerStreamQuery serves POST /streams/v1/queries. A changed config_hash without reset is
// a 409 (the reference answered 200 with success:false; both SDKs take either).
func (s *Server) registerStreamQuery(ctx *fasthttp.RequestCtx) error {
	req, err := decodeRegisterQuery(ctx.PostBody())
	if err != nil {
		return err
	}
	scope := s.scope(ctx)
	q := persistence.StreamQuery{ConfigHash: req.hash, Reset: req.reset}
	if q.Name, err = queueName(scope, req.name, "name"); err == nil {
		if q.SourceQueue, err = queueName(scope, req.source, "source_queue"); err == nil && req.sink != "" {
			q.SinkQueue, err = queueName(scope, req.sink, "sink_queue")
		}
	}
	if err != nil {
		return err
	}
	c, cancel := s.dbContext()
	defer cancel()
	r, err := s.Store.RegisterQuery(c, q)
	if err != nil {
		return err
	}
	out := registeredQueryJSON{ConfigHash: req.hash, Name: req.name, QueryID: r.ID.String(), Success: !r.Conflict}
	if r.Conflict {
		out.Error = fmt.Sprintf("config_hash mismatch: operator chain changed for queryId '%s'. "+
			"Pass reset:true to wipe existing state, or use a new queryId.", req.name)
		writeJSON(ctx, fasthttp.StatusConflict, out)
		return nil
	}
	out.Fresh, out.Reset = &r.Fresh, &r.Reset
	if r.Reset {
		s.Log.Info("stream query state reset", "query", q.Name.String(), "query_id", r.ID.String())
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

// deleteStreamQuery serves DELETE /streams/v1/queries/{query} (admin), an addition: the query,
// its state and its consumer group's cursors go, in one transaction.
func (s *Server) deleteStreamQuery(ctx *fasthttp.RequestCtx) error {
	name, err := queueName(s.scope(ctx), pathParam(ctx, "query"), "query")
	if err != nil {
		return err
	}
	c, cancel := s.dbContext()
	defer cancel()
	d, found, err := s.Store.DeleteQuery(c, name)
	if err != nil {
		return err
	}
	if !found {
		writeJSON(ctx, fasthttp.StatusNotFound, streamError{Error: "query not found"})
		return nil
	}
	s.Log.Info("stream query deleted", "query", name.String(), "query_id", d.ID.String(),
		"state_rows", d.StateRows, "cursors", d.Cursors)
	writeJSON(ctx, fasthttp.StatusOK, struct {
		Cursors   int64  `json:"cursors_deleted"`
		Name      string `json:"name"`
		QueryID   string `json:"query_id"`
		StateRows int64  `json:"state_rows_deleted"`
		Success   bool   `json:"success"`
	}{d.Cursors, name.Name, d.ID.String(), d.StateRows, true})
	return nil
}

// cycleJSON is the body of POST /streams/v1/cycle as it arrives.
type cycleJSON struct {
	QueryID       json.RawMessage `json:"query_id"`
	PartitionID   json.RawMessage `json:"partition_id"`
	ConsumerGroup json.RawMessage `json:"consumer_group"`
	StateOps      json.RawMessage `json:"state_ops"`
	PushItems     json.RawMessage `json:"push_items"`
	Ack           json.RawMessage `json:"ack"`
	ReleaseLease  json.RawMessage `json:"release_lease"`
}

type stateOpJSON struct {
	Type  json.RawMessage `json:"type"`
	Key   json.RawMessage `json:"key"`
	Value json.RawMessage `json:"value"`
}

type cycleAckJSON struct {
	TransactionID json.RawMessage `json:"transactionId"`
	LeaseID       json.RawMessage `json:"leaseId"`
	Status        json.RawMessage `json:"status"`
	Count         json.RawMessage `json:"count"`
	Error         json.RawMessage `json:"error"`
}

// cycle is a validated cycle. Its push items' queues and its ack's scope are set by the
// handler, in the caller's tenant.
type cycle struct {
	persistence.StreamCycle
	push     []pushItem
	ackCount int64
}

// decodeCycle decodes and validates a cycle body; every error names its field.
func decodeCycle(body []byte) (cycle, error) {
	var raw cycleJSON
	var c cycle
	if err := parseBody(body, &raw); err != nil {
		return c, err
	}
	var err error
	if c.QueryID, err = uuidField(raw.QueryID, "query_id"); err != nil {
		return c, err
	}
	if c.PartitionID, err = uuidField(raw.PartitionID, "partition_id"); err != nil {
		return c, err
	}
	group, err := stringField(raw.ConsumerGroup, "consumer_group", "")
	if err != nil {
		return c, err
	}
	if group, err = groupName(group, "consumer_group"); err != nil {
		return c, err
	}
	if c.StateOps, err = decodeStateOps(raw.StateOps); err != nil {
		return c, err
	}
	var items []json.RawMessage
	if items, err = arrayField(raw.PushItems, "push_items"); err != nil {
		return c, err
	}
	c.push = make([]pushItem, len(items))
	for i, r := range items {
		prefix := "push_items[" + strconv.Itoa(i) + "]"
		var it pushItemJSON
		if len(r) == 0 || r[0] != '{' || json.Unmarshal(r, &it) != nil {
			return c, badf(prefix + " must be an object")
		}
		if c.push[i], err = decodePushItem(&it, prefix+"."); err != nil {
			return c, err
		}
		if c.push[i].BadTrace != "" {
			return c, badf(prefix + ".traceId must be a UUID")
		}
	}
	release, err := boolField(raw.ReleaseLease, "release_lease", true)
	if err != nil {
		return c, err
	}
	if len(raw.Ack) == 0 || string(raw.Ack) == "null" {
		return c, nil
	}
	var a cycleAckJSON
	if raw.Ack[0] != '{' || json.Unmarshal(raw.Ack, &a) != nil {
		return c, badf("ack must be an object")
	}
	ack := persistence.AckItem{PartitionID: c.PartitionID, Group: group, Lease: persistence.LeaseRelease}
	if ack.TransactionID, err = nameField(a.TransactionID, "ack.transactionId"); err != nil {
		return c, err
	}
	if ack.LeaseID, err = stringField(a.LeaseID, "ack.leaseId", ""); err != nil {
		return c, err
	}
	if err = checkLen(ack.LeaseID, "ack.leaseId"); err != nil {
		return c, err
	}
	status, err := stringField(a.Status, "ack.status", string(persistence.AckCompleted))
	if err != nil {
		return c, err
	}
	switch ack.Status = persistence.AckStatus(status); ack.Status {
	case persistence.AckCompleted, "success":
		ack.Status = persistence.AckCompleted
		if !release {
			ack.Lease = persistence.LeaseKeep
		}
	case persistence.AckFailed, persistence.AckDLQ:
		// Dead-lettered at once, the cursor moved past it and the lease released.
	default:
		return c, badf("ack.status must be one of completed, success, failed, dlq")
	}
	if ack.Error, err = stringField(a.Error, "ack.error", ""); err != nil {
		return c, err
	}
	c.ackCount = 1
	if len(a.Count) > 0 && string(a.Count) != "null" {
		if err := json.Unmarshal(a.Count, &c.ackCount); err != nil || c.ackCount < 0 {
			return c, badf("ack.count must be a non-negative integer")
		}
	}
	c.Ack = &ack
	return c, nil
}

// decodeStateOps decodes state_ops: absent or null is none.
func decodeStateOps(raw json.RawMessage) ([]persistence.StateOp, error) {
	entries, err := arrayField(raw, "state_ops")
	if err != nil {
		return nil, err
	}
	ops := make([]persistence.StateOp, len(entries))
	for i, r := range entries {
		prefix := "state_ops[" + strconv.Itoa(i) + "]"
		var op stateOpJSON
		if len(r) == 0 || r[0] != '{' || json.Unmarshal(r, &op) != nil {
			return nil, badf(prefix + " must be an object")
		}
		typ, err := stringField(op.Type, prefix+".type", "")
		if err != nil {
			return nil, err
		}
		key, err := stringField(op.Key, prefix+".key", "")
		if err != nil {
			return nil, err
		}
		if key == "" {
			return nil, badf(prefix + ".key is required")
		}
		if len(key) > maxStateKey {
			return nil, badf(fmt.Sprintf("%s.key must be at most %d bytes", prefix, maxStateKey))
		}
		ops[i].Key = key
		switch typ {
		case "upsert":
			if len(op.Value) == 0 {
				return nil, badf(prefix + ".value is required for an upsert")
			}
			if ops[i].Value, err = sanitizePayload(op.Value, prefix+".value"); err != nil {
				return nil, err
			}
		case "delete":
		default:
			return nil, badf(prefix + ".type must be upsert or delete")
		}
	}
	return ops, nil
}

// arrayField splits an optional JSON array into its entries; absent or null is none.
func arrayField(raw json.RawMessage, name string) ([]json.RawMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var out []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &out) != nil {
		return nil, badf(name + " must be an array")
	}
	return out, nil
}

// uuidField is a required string holding a UUID.
func uuidField(raw json.RawMessage, name string) (uuid.UUID, error) {
	if id, ok := plainUUID(raw); ok {
		return id, nil
	}
	s, err := stringField(raw, name, "")
	if err != nil {
		return uuid.Nil, err
	}
	if s == "" {
		return uuid.Nil, badf(name + " is required")
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, badf(name + " must be a UUID")
	}
	return id, nil
}

type cycleAckResultJSON struct {
	Count         int64 `json:"count"`
	DLQ           bool  `json:"dlq"`
	LeaseReleased bool  `json:"lease_released"`
	Success       bool  `json:"success"`
}

type cycleJSONAnswer struct {
	AckResult       *cycleAckResultJSON `json:"ack_result"`
	Error           string              `json:"error,omitempty"`
	PartitionID     string              `json:"partition_id"`
	PushResults     []pushResultJSON    `json:"push_results"`
	QueryID         string              `json:"query_id"`
	QueueName       *string             `json:"queueName"`
	StateOpsApplied int                 `json:"state_ops_applied"`
	Success         bool                `json:"success"`
}

// streamCycle serves POST /streams/v1/cycle. Unlike the reference, the sink pushes carry the
// token's sub as producerSub, are sealed for encrypted sink queues and wake parked pops here
// and across the mesh, as a push does.
func (s *Server) streamCycle(ctx *fasthttp.RequestCtx) error {
	defer s.measure(telemetry.StreamCycle, time.Now())
	c, err := decodeCycle(ctx.PostBody())
	if err != nil {
		return err
	}
	scope, sub := s.scope(ctx), producerSub(ctx)
	c.Scope = scope
	if c.Ack != nil {
		c.Ack.Scope = scope
	}
	c.Push = make([]persistence.PushItem, len(c.push))
	for i := range c.push {
		it := &c.push[i]
		it.ProducerSub = sub
		if it.Queue, err = queueName(scope, it.sentQueue, "push_items["+strconv.Itoa(i)+"].queue"); err != nil {
			return err
		}
		c.Push[i] = it.PushItem
	}
	dc, cancel := s.dbContext()
	defer cancel()
	res, reason, err := s.Writer.Cycle(dc, c.StreamCycle)
	if err != nil {
		return err
	}
	out := cycleJSONAnswer{
		PartitionID: c.PartitionID.String(), PushResults: []pushResultJSON{}, QueryID: c.QueryID.String(),
		Success: reason == "", Error: reason,
	}
	if res.SourceQueue != (persistence.QueueName{}) {
		out.QueueName = &res.SourceQueue.Name
	}
	if reason != "" {
		writeJSON(ctx, fasthttp.StatusOK, out)
		return nil
	}
	out.StateOpsApplied = res.StateOpsApplied
	for i, r := range res.Push {
		it := c.Push[i]
		p := pushResultJSON{Index: i, QueueName: it.Queue.Name, Status: string(r.Status), TransactionID: it.TransactionID,
			MessageID: r.MessageID.String()}
		if r.Status == persistence.StatusQueued {
			pid := r.PartitionID.String()
			p.PartitionID = jsonString(&pid)
			p.TraceID = jsonString(uuidText(it.TraceID))
		}
		out.PushResults = append(out.PushResults, p)
	}
	if res.Ack != nil {
		out.AckResult = &cycleAckResultJSON{Count: c.ackCount, DLQ: res.Ack.DLQ, LeaseReleased: res.Ack.LeaseReleased, Success: true}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

// stateGetJSON is the body of POST /streams/v1/state/get as it arrives.
type stateGetJSON struct {
	QueryID        json.RawMessage `json:"query_id"`
	PartitionID    json.RawMessage `json:"partition_id"`
	Keys           json.RawMessage `json:"keys"`
	KeyPrefix      json.RawMessage `json:"key_prefix"`
	RipeAtOrBefore json.RawMessage `json:"ripe_at_or_before"`
}

func decodeStateGet(body []byte) (persistence.StateFilter, error) {
	var raw stateGetJSON
	var f persistence.StateFilter
	if err := parseBody(body, &raw); err != nil {
		return f, err
	}
	var err error
	if f.QueryID, err = uuidField(raw.QueryID, "query_id"); err != nil {
		return f, err
	}
	if f.PartitionID, err = uuidField(raw.PartitionID, "partition_id"); err != nil {
		return f, err
	}
	keys, err := arrayField(raw.Keys, "keys")
	if err != nil {
		return f, err
	}
	for i, k := range keys {
		key, err := stringField(k, "keys["+strconv.Itoa(i)+"]", "")
		if err != nil || len(k) == 0 || k[0] != '"' {
			return f, badf("keys[" + strconv.Itoa(i) + "] must be a string")
		}
		if len(key) > maxStateKey {
			return f, badf(fmt.Sprintf("keys[%d] must be at most %d bytes", i, maxStateKey))
		}
		f.Keys = append(f.Keys, key)
	}
	if f.KeyPrefix, err = stringField(raw.KeyPrefix, "key_prefix", ""); err != nil {
		return f, err
	}
	if len(f.KeyPrefix) > maxStateKey {
		return f, badf(fmt.Sprintf("key_prefix must be at most %d bytes", maxStateKey))
	}
	if len(raw.RipeAtOrBefore) > 0 && string(raw.RipeAtOrBefore) != "null" {
		var ripe float64
		if err := json.Unmarshal(raw.RipeAtOrBefore, &ripe); err != nil {
			return f, badf("ripe_at_or_before must be a number (milliseconds since the epoch)")
		}
		f.RipeAtOrBefore = &ripe
	}
	return f, nil
}

type stateRowJSON struct {
	Key       string          `json:"key"`
	UpdatedAt string          `json:"updated_at"`
	Value     json.RawMessage `json:"value"`
}

// streamState serves POST /streams/v1/state/get (read-only).
func (s *Server) streamState(ctx *fasthttp.RequestCtx) error {
	f, err := decodeStateGet(ctx.PostBody())
	if err != nil {
		return err
	}
	f.Scope = s.scope(ctx)
	c, cancel := s.dbContext()
	defer cancel()
	rows, err := s.Store.QueryState(c, f)
	if err != nil {
		return err
	}
	out := struct {
		Rows    []stateRowJSON `json:"rows"`
		Success bool           `json:"success"`
	}{Rows: make([]stateRowJSON, len(rows)), Success: true}
	for i, r := range rows {
		out.Rows[i] = stateRowJSON{Key: r.Key, UpdatedAt: r.UpdatedAt.UTC().Format("2006-01-02T15:04:05.000000+00:00"), Value: r.Value}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
	return nil
}

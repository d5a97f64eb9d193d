package http

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"queen/persistence"
)

// maxName is the longest queue, partition, consumer group or transactionId the broker stores.
const maxName = 255

// parseBody decodes a JSON object body into v: 400 for an empty body or invalid JSON.
func parseBody(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badf("Empty request body")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return badf("Invalid JSON: " + err.Error())
	}
	return nil
}

// field decodes an optional JSON string field; absent or null leaves def.
func stringField(raw json.RawMessage, name, def string) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return def, nil
	}
	if raw[0] != '"' {
		return "", badf(name + " must be a string")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", badf(name + " must be a string")
	}
	return s, nil
}

// nameField is a required, non-empty string of at most maxName characters.
func nameField(raw json.RawMessage, name string) (string, error) {
	s, err := stringField(raw, name, "")
	if err != nil {
		return "", err
	}
	if s == "" {
		return "", badf(name + " is required")
	}
	return s, checkLen(s, name)
}

func checkLen(s, name string) error {
	if utf8.RuneCountInString(s) > maxName {
		return badf(fmt.Sprintf("%s must be at most %d characters", name, maxName))
	}
	return nil
}

// pushItemJSON is one item of a push body as it arrives.
type pushItemJSON struct {
	Queue         json.RawMessage `json:"queue"`
	Partition     json.RawMessage `json:"partition"`
	Payload       json.RawMessage `json:"payload"`
	Data          json.RawMessage `json:"data"` // accepted for payload in transaction push ops
	TransactionID json.RawMessage `json:"transactionId"`
	TraceID       json.RawMessage `json:"traceId"`
}

// pushItem is a validated push item. BadTrace is set when traceId is not a UUID: that item
// alone is answered "failed", the others are stored.
type pushItem struct {
	persistence.PushItem
	BadTrace string
}

// decodePush decodes and validates a push body.
func decodePush(body []byte) ([]pushItem, error) {
	var req struct {
		Items json.RawMessage `json:"items"`
	}
	if err := parseBody(body, &req); err != nil {
		return nil, err
	}
	var raw []pushItemJSON
	if len(req.Items) == 0 || req.Items[0] != '[' || json.Unmarshal(req.Items, &raw) != nil {
		return nil, badf("items array is required")
	}
	items := make([]pushItem, len(raw))
	for i := range raw {
		it, err := decodePushItem(&raw[i], fmt.Sprintf("items[%d].", i))
		if err != nil {
			return nil, err
		}
		items[i] = it
	}
	return items, nil
}

// decodePushItem validates one item; prefix names its position in error messages.
func decodePushItem(raw *pushItemJSON, prefix string) (pushItem, error) {
	var it pushItem
	var err error
	if it.Queue, err = nameField(raw.Queue, prefix+"queue"); err != nil {
		return it, err
	}
	if it.Partition, err = stringField(raw.Partition, prefix+"partition", "Default"); err != nil {
		return it, err
	}
	if it.Partition == "" {
		return it, badf(prefix + "partition must not be empty")
	}
	if err = checkLen(it.Partition, prefix+"partition"); err != nil {
		return it, err
	}
	if it.TransactionID, err = stringField(raw.TransactionID, prefix+"transactionId", ""); err != nil {
		return it, err
	}
	if it.TransactionID == "" {
		it.TransactionID = uuid.NewString()
	} else if err = checkLen(it.TransactionID, prefix+"transactionId"); err != nil {
		return it, err
	}
	trace, err := stringField(raw.TraceID, prefix+"traceId", "")
	if err != nil {
		return it, err
	}
	if trace != "" {
		id, perr := uuid.Parse(trace)
		if perr != nil {
			it.BadTrace = "traceId must be a UUID"
		} else {
			it.TraceID = pgtype.UUID{Bytes: id, Valid: true}
		}
	}
	payload := raw.Payload
	if len(payload) == 0 {
		payload = raw.Data
	}
	if it.Payload, err = sanitizePayload(payload, prefix+"payload"); err != nil {
		return it, err
	}
	return it, nil
}

// sanitizePayload returns the payload as PostgreSQL's jsonb will accept it. jsonb refuses the
// escape \u0000 and unpaired surrogate escapes; the first is refused here with a 400 (it has no
// jsonb form), the second is re-encoded with U+FFFD as Go decodes it. Either would otherwise fail
// the whole fused database call, and with it other clients' requests.
func sanitizePayload(raw json.RawMessage, name string) (json.RawMessage, error) {
	if len(raw) == 0 {
		return json.RawMessage("null"), nil
	}
	if !bytes.Contains(raw, []byte(`\u`)) {
		return raw, nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, badf(name + " is not valid JSON")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, badf(name + " cannot be encoded")
	}
	out := bytes.TrimRight(buf.Bytes(), "\n")
	if bytes.Contains(out, []byte(`\u0000`)) {
		return nil, badf(name + ` must not contain the character \u0000`)
	}
	return out, nil
}

// ackJSON is one acknowledgement as it arrives.
type ackJSON struct {
	TransactionID json.RawMessage `json:"transactionId"`
	PartitionID   json.RawMessage `json:"partitionId"`
	Status        json.RawMessage `json:"status"`
	ConsumerGroup json.RawMessage `json:"consumerGroup"`
	LeaseID       json.RawMessage `json:"leaseId"`
	Error         json.RawMessage `json:"error"`
}

// decodeAck validates one acknowledgement. group, when not empty, overrides the item's own
// consumerGroup (the batch route's top-level group).
func decodeAck(raw *ackJSON, prefix, group string) (persistence.AckItem, error) {
	var a persistence.AckItem
	var err error
	if a.TransactionID, err = stringField(raw.TransactionID, prefix+"transactionId", ""); err != nil || a.TransactionID == "" {
		return a, badf(prefix + "transactionId is required")
	}
	pid, err := stringField(raw.PartitionID, prefix+"partitionId", "")
	if err != nil || pid == "" {
		return a, badf(prefix + "partitionId is required to ensure message uniqueness")
	}
	if a.PartitionID, err = uuid.Parse(pid); err != nil {
		return a, badf(prefix + "partitionId must be a UUID")
	}
	status, err := stringField(raw.Status, prefix+"status", persistence.AckCompleted)
	if err != nil {
		return a, err
	}
	switch status {
	case "completed", "success":
		a.Status = persistence.AckCompleted
	case persistence.AckFailed, persistence.AckDLQ, persistence.AckRetry:
		a.Status = status
	default:
		return a, badf(prefix + "status must be one of completed, success, failed, retry, dlq")
	}
	if group == "" {
		if group, err = stringField(raw.ConsumerGroup, prefix+"consumerGroup", ""); err != nil {
			return a, err
		}
	}
	if a.Group, err = groupName(group, prefix+"consumerGroup"); err != nil {
		return a, err
	}
	if a.LeaseID, err = stringField(raw.LeaseID, prefix+"leaseId", ""); err != nil {
		return a, err
	}
	if a.Error, err = stringField(raw.Error, prefix+"error", ""); err != nil {
		return a, err
	}
	return a, nil
}

// groupName maps an absent or empty consumer group to queue mode.
func groupName(g, field string) (string, error) {
	if g == "" {
		return persistence.QueueMode, nil
	}
	return g, checkLen(g, field)
}

// decodeAckBatch decodes the /ack/batch body.
func decodeAckBatch(body []byte) ([]persistence.AckItem, error) {
	var req struct {
		ConsumerGroup   json.RawMessage `json:"consumerGroup"`
		Acknowledgments json.RawMessage `json:"acknowledgments"`
	}
	if err := parseBody(body, &req); err != nil {
		return nil, err
	}
	group, err := stringField(req.ConsumerGroup, "consumerGroup", "")
	if err != nil {
		return nil, err
	}
	var raw []ackJSON
	if len(req.Acknowledgments) == 0 || req.Acknowledgments[0] != '[' || json.Unmarshal(req.Acknowledgments, &raw) != nil {
		return nil, badf("acknowledgments array is required")
	}
	out := make([]persistence.AckItem, len(raw))
	for i := range raw {
		if out[i], err = decodeAck(&raw[i], fmt.Sprintf("acknowledgments[%d].", i), group); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// txOpJSON is one transaction operation as it arrives: an ack, or a push of items (or of one
// inline item, the alternative form the reference accepts).
type txOpJSON struct {
	Type          json.RawMessage `json:"type"`
	Items         json.RawMessage `json:"items"`
	TransactionID json.RawMessage `json:"transactionId"`
	PartitionID   json.RawMessage `json:"partitionId"`
	Status        json.RawMessage `json:"status"`
	ConsumerGroup json.RawMessage `json:"consumerGroup"`
	LeaseID       json.RawMessage `json:"leaseId"`
	Error         json.RawMessage `json:"error"`
	Queue         json.RawMessage `json:"queue"`
	Partition     json.RawMessage `json:"partition"`
	Payload       json.RawMessage `json:"payload"`
	Data          json.RawMessage `json:"data"`
	TraceID       json.RawMessage `json:"traceId"`
}

// txOp is a validated transaction operation.
type txOp struct {
	push []pushItem
	ack  *persistence.AckItem
}

// decodeTransaction decodes the /transaction body.
func decodeTransaction(body []byte) ([]txOp, error) {
	var req struct {
		Operations json.RawMessage `json:"operations"`
	}
	if err := parseBody(body, &req); err != nil {
		return nil, err
	}
	var raw []json.RawMessage
	if len(req.Operations) == 0 || req.Operations[0] != '[' || json.Unmarshal(req.Operations, &raw) != nil {
		return nil, badf("operations array required")
	}
	if len(raw) == 0 {
		return nil, badf("operations array cannot be empty")
	}
	ops := make([]txOp, len(raw))
	for i, r := range raw {
		prefix := fmt.Sprintf("operations[%d].", i)
		var op txOpJSON
		if len(r) == 0 || r[0] != '{' || json.Unmarshal(r, &op) != nil {
			return nil, badf(prefix[:len(prefix)-1] + " must be an object")
		}
		typ, err := stringField(op.Type, prefix+"type", "")
		if err != nil {
			return nil, err
		}
		switch typ {
		case "ack":
			a, err := decodeAck(&ackJSON{
				TransactionID: op.TransactionID, PartitionID: op.PartitionID, Status: op.Status,
				ConsumerGroup: op.ConsumerGroup, LeaseID: op.LeaseID, Error: op.Error,
			}, prefix, "")
			if err != nil {
				return nil, err
			}
			ops[i].ack = &a
		case "push":
			if ops[i].push, err = decodeTxPush(&op, prefix); err != nil {
				return nil, err
			}
		default:
			return nil, badf(prefix + "type must be push or ack")
		}
	}
	return ops, nil
}

func decodeTxPush(op *txOpJSON, prefix string) ([]pushItem, error) {
	if len(op.Items) == 0 {
		it, err := decodePushItem(&pushItemJSON{
			Queue: op.Queue, Partition: op.Partition, Payload: op.Payload, Data: op.Data,
			TransactionID: op.TransactionID, TraceID: op.TraceID,
		}, prefix)
		if err == nil && it.BadTrace != "" {
			err = badf(prefix + "traceId must be a UUID")
		}
		if err != nil {
			return nil, err
		}
		return []pushItem{it}, nil
	}
	var raw []pushItemJSON
	if op.Items[0] != '[' || json.Unmarshal(op.Items, &raw) != nil {
		return nil, badf(prefix + "items must be an array")
	}
	if len(raw) == 0 {
		return nil, badf(prefix + "items must not be empty")
	}
	out := make([]pushItem, len(raw))
	for j := range raw {
		it, err := decodePushItem(&raw[j], fmt.Sprintf("%sitems[%d].", prefix, j))
		if err != nil {
			return nil, err
		}
		if it.BadTrace != "" {
			return nil, badf(fmt.Sprintf("%sitems[%d].traceId must be a UUID", prefix, j))
		}
		out[j] = it
	}
	return out, nil
}

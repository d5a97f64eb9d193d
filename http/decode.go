package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"queen/persistence"
)

// maxName is the longest queue, partition, consumer group or transactionId the broker stores.
const maxName = 255

// jsonSpace is the whitespace JSON allows around a value.
const jsonSpace = " \t\r\n"

// parseBody decodes a JSON object body into v: 400 for an empty body, invalid JSON or a body
// that is not an object. A type mismatch inside the object is returned as is (an
// *json.UnmarshalTypeError) for the caller to name the field.
func parseBody(body []byte, v any) error {
	// JSON's whitespace only: bytes.TrimSpace would also drop \v and \f, which the decoder
	// then refuses mid-body, so a body it accepted here would not be one JSON value.
	body = bytes.Trim(body, jsonSpace)
	if len(body) == 0 {
		return badf("Empty request body")
	}
	if body[0] != '{' {
		if !json.Valid(body) {
			return badf("Invalid JSON: " + syntaxError(body))
		}
		return badf("request body must be a JSON object")
	}
	err := json.Unmarshal(body, v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return badf("Invalid JSON: " + err.Error())
	}
	return err
}

// syntaxError describes why body is not JSON.
func syntaxError(body []byte) string {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return err.Error()
	}
	return "malformed"
}

// stringField decodes an optional JSON string field; absent or null leaves def.
func stringField(raw json.RawMessage, name, def string) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return def, nil
	}
	if raw[0] != '"' {
		return "", badf(name + " must be a string")
	}
	// Most strings have no escapes: take the bytes between the quotes as they are.
	if inner := raw[1 : len(raw)-1]; bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		if bytes.IndexByte(inner, 0) >= 0 {
			return "", badf(name + ` must not contain the character \u0000`)
		}
		return string(inner), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", badf(name + " must be a string")
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "", badf(name + ` must not contain the character \u0000`)
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

// pushItem is a validated push item. sentQueue is the queue's name as the client sent it: the
// handler makes it PushItem.Queue, in the caller's tenant. BadTrace is set when traceId is not
// a UUID: that item alone is answered "failed", the others are stored.
type pushItem struct {
	persistence.PushItem
	sentQueue string
	BadTrace  string
}

// decodePush decodes and validates a push body: fastPush when it can, encoding/json otherwise.
func decodePush(body []byte) ([]pushItem, error) {
	if items, handled, err := fastPush(body); handled {
		return items, err
	}
	return decodePushJSON(body)
}

// decodePushJSON decodes and validates a push body with encoding/json.
func decodePushJSON(body []byte) ([]pushItem, error) {
	var req struct {
		Items []pushItemJSON `json:"items"`
	}
	if err := parseBody(body, &req); err != nil {
		var bad *badRequest
		if errors.As(err, &bad) {
			return nil, err
		}
		return nil, badf("items array is required")
	}
	if req.Items == nil {
		return nil, badf("items array is required")
	}
	items := make([]pushItem, len(req.Items))
	for i := range req.Items {
		it, err := decodePushItem(&req.Items[i], fmt.Sprintf("items[%d].", i))
		if err != nil {
			return nil, err
		}
		items[i] = it
	}
	return items, nil
}

// decodePushItem validates one item; prefix names its position in error messages.
func decodePushItem(raw *pushItemJSON, prefix string) (pushItem, error) {
	return decodePushItemAfter(raw, prefix, nil)
}

// decodePushItemAfter is decodePushItem for an item of a push whose previous item is prev (nil
// for the first): an item naming the same queue or partition as prev shares its string, as the
// items of a push mostly do.
func decodePushItemAfter(raw *pushItemJSON, prefix string, prev *pushItem) (pushItem, error) {
	var it pushItem
	var err error
	if prev != nil && sameString(raw.Queue, prev.sentQueue) {
		it.sentQueue = prev.sentQueue
	} else if it.sentQueue, err = nameField(raw.Queue, prefix+"queue"); err != nil {
		return it, err
	}
	if prev != nil && sameString(raw.Partition, prev.Partition) {
		it.Partition = prev.Partition
	} else if it.Partition, err = partitionField(raw.Partition, prefix+"partition"); err != nil {
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
			it.TraceID = uuid.NullUUID{UUID: id, Valid: true}
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

// partitionField is a push item's partition: "Default" when absent, never empty.
func partitionField(raw json.RawMessage, name string) (string, error) {
	p, err := stringField(raw, name, "Default")
	switch {
	case err != nil:
		return "", err
	case p == "":
		return "", badf(name + " must not be empty")
	}
	return p, checkLen(p, name)
}

// sanitizePayload returns the payload in a form PostgreSQL's jsonb accepts, or a 400: payloads
// are stored as text, but the browse and inspect routes read them as jsonb, and one jsonb
// refused there would fail the route (before segments, it failed the whole fused push). Most payloads pass through untouched after one scan; a
// payload with \u escapes or invalid UTF-8 is re-encoded (unpaired surrogates and bad bytes
// become U+FFFD, numbers keep their exact literals), and one holding the character U+0000,
// which jsonb has no form for, is refused.
func sanitizePayload(raw json.RawMessage, name string) (json.RawMessage, error) {
	if len(raw) == 0 {
		return json.RawMessage("null"), nil
	}
	escapes, err := scanPayload(raw)
	if err != nil {
		return nil, badf(name + " " + err.Error())
	}
	if !escapes && utf8.Valid(raw) {
		return raw, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, badf(name + " is not valid JSON")
	}
	if hasNUL(v) {
		return nil, badf(name + ` must not contain the character \u0000`)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, badf(name + " cannot be encoded")
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// hasNUL reports whether a decoded JSON value holds U+0000 in a string or an object key.
func hasNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.IndexByte(v, 0) >= 0
	case []any:
		for _, e := range v {
			if hasNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range v {
			if strings.IndexByte(k, 0) >= 0 || hasNUL(e) {
				return true
			}
		}
	}
	return false
}

// PostgreSQL numeric limits, which jsonb numbers share.
const (
	maxNumericIntDigits  = 131072
	maxNumericFracDigits = 16383
)

// scanPayload walks valid JSON once: it reports whether any string holds a \u escape, and
// refuses a number PostgreSQL's numeric cannot hold.
func scanPayload(raw []byte) (escapes bool, err error) {
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '"':
			// Most strings hold no escape: they end at the next quote, which IndexByte finds
			// many bytes at a time (byte by byte, this scan was 4 % of the broker's CPU).
			if j := bytes.IndexByte(raw[i+1:], '"'); j >= 0 && bytes.IndexByte(raw[i+1:i+1+j], '\\') < 0 {
				i += j + 1
				continue
			}
			for i++; i < len(raw) && raw[i] != '"'; i++ {
				if raw[i] == '\\' {
					i++
					escapes = escapes || (i < len(raw) && raw[i] == 'u')
				}
			}
		case c == '-' || (c >= '0' && c <= '9'):
			j := i
			for j < len(raw) && strings.IndexByte("+-.0123456789eE", raw[j]) >= 0 {
				j++
			}
			if !numericFits(raw[i:j]) {
				return escapes, fmt.Errorf("holds the number %.40s, outside the range PostgreSQL stores", raw[i:j])
			}
			i = j - 1
		}
	}
	return escapes, nil
}

// numericFits reports whether a JSON number literal fits PostgreSQL's numeric: at most 131072
// digits before the decimal point and 16383 after it, counting the exponent's shift.
func numericFits(lit []byte) bool {
	var intDigits, fracDigits int64
	exp := int64(0)
	part := 0 // 0 integer, 1 fraction, 2 exponent
	significant := false
	expSign := int64(1)
	for _, c := range lit {
		switch {
		case c == '.':
			part = 1
		case c == 'e' || c == 'E':
			part = 2
		case c == '-' && part == 2:
			expSign = -1
		case c == '-' || c == '+':
		case part == 2:
			if exp < 1<<40 { // saturate: anything this large is out of range anyway
				exp = exp*10 + int64(c-'0')
			}
		case part == 1:
			fracDigits++
			significant = significant || c != '0'
		default:
			if significant || c != '0' {
				intDigits++
				significant = true
			}
		}
	}
	exp *= expSign
	if fracDigits-exp > maxNumericFracDigits {
		return false
	}
	return !significant || intDigits+exp <= maxNumericIntDigits
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
	return decodeAckAfter(raw, prefix, group, nil)
}

// decodeAckAfter is decodeAck for an item of a batch whose previous item is prev (nil for the
// first): an item naming the same lease or error as prev shares its string. An item made four
// strings (transactionId, partition id, status, lease), of which only the transactionId is
// the item's own: the acks of a batch repeat their lease, and the partition id and status are
// read without a string.
func decodeAckAfter(raw *ackJSON, prefix, group string, prev *persistence.AckItem) (persistence.AckItem, error) {
	var a persistence.AckItem
	var err error
	if a.TransactionID, err = stringField(raw.TransactionID, prefix+"transactionId", ""); err != nil {
		return a, err
	}
	if a.TransactionID == "" {
		return a, badf(prefix + "transactionId is required")
	}
	if id, ok := plainUUID(raw.PartitionID); ok {
		a.PartitionID = id
	} else {
		pid, err := stringField(raw.PartitionID, prefix+"partitionId", "")
		if err != nil || pid == "" {
			return a, badf(prefix + "partitionId is required to ensure message uniqueness")
		}
		if a.PartitionID, err = uuid.Parse(pid); err != nil {
			return a, badf(prefix + "partitionId must be a UUID")
		}
	}
	if a.Status, err = ackStatusField(raw.Status, prefix+"status"); err != nil {
		return a, err
	}
	if group == "" {
		if group, err = stringField(raw.ConsumerGroup, prefix+"consumerGroup", ""); err != nil {
			return a, err
		}
	}
	if a.Group, err = groupName(group, prefix+"consumerGroup"); err != nil {
		return a, err
	}
	if prev != nil && sameString(raw.LeaseID, prev.LeaseID) {
		a.LeaseID = prev.LeaseID
	} else if a.LeaseID, err = stringField(raw.LeaseID, prefix+"leaseId", ""); err != nil {
		return a, err
	}
	if prev != nil && sameString(raw.Error, prev.Error) {
		a.Error = prev.Error
	} else if a.Error, err = stringField(raw.Error, prefix+"error", ""); err != nil {
		return a, err
	}
	return a, nil
}

// sameString reports whether raw is the JSON string of s written without escapes, so that s
// is what stringField would make of it. s came from stringField, which checked it.
func sameString(raw json.RawMessage, s string) bool {
	return len(raw) == len(s)+2 && raw[0] == '"' && raw[len(raw)-1] == '"' && string(raw[1:len(raw)-1]) == s &&
		strings.IndexByte(s, '\\') < 0
}

// plainUUID reads raw, a JSON string of ASCII holding a UUID and no escape, from the body's
// bytes; ok is false for anything else, which the caller reads the long way and names in its
// error. (uuid.Parse takes a text of 38 bytes as a braced UUID without looking at the braces,
// so the bytes must be the text stringField would give.)
func plainUUID(raw json.RawMessage) (id uuid.UUID, ok bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return uuid.UUID{}, false
	}
	inner := raw[1 : len(raw)-1]
	for _, c := range inner {
		if c >= utf8.RuneSelf || c == '\\' || c == '"' || c < ' ' {
			return uuid.UUID{}, false
		}
	}
	id, err := uuid.ParseBytes(inner)
	return id, err == nil
}

// ackStatusField reads an ack's status; absent means completed.
func ackStatusField(raw json.RawMessage, name string) (persistence.AckStatus, error) {
	// The statuses as the clients write them, compared without making a string of each.
	switch string(raw) {
	case "", "null", `"completed"`, `"success"`: // success: the reference's synonym of completed
		return persistence.AckCompleted, nil
	case `"failed"`:
		return persistence.AckFailed, nil
	case `"dlq"`:
		return persistence.AckDLQ, nil
	case `"retry"`:
		return persistence.AckRetry, nil
	}
	status, err := stringField(raw, name, string(persistence.AckCompleted))
	if err != nil {
		return "", err
	}
	switch s := persistence.AckStatus(status); s {
	case persistence.AckCompleted, persistence.AckFailed, persistence.AckDLQ, persistence.AckRetry:
		return s, nil
	case "success":
		return persistence.AckCompleted, nil
	}
	return "", badf(name + " must be one of completed, success, failed, retry, dlq")
}

// groupName maps an absent or empty consumer group to queue mode.
func groupName(g, field string) (string, error) {
	if g == "" {
		return persistence.QueueMode, nil
	}
	return g, checkLen(g, field)
}

// decodeAckBatch decodes the /ack/batch body: fastAckBatch when it can, encoding/json otherwise.
func decodeAckBatch(body []byte) ([]persistence.AckItem, error) {
	if acks, handled, err := fastAckBatch(body); handled {
		return acks, err
	}
	return decodeAckBatchJSON(body)
}

// decodeAckBatchJSON decodes the /ack/batch body with encoding/json.
func decodeAckBatchJSON(body []byte) ([]persistence.AckItem, error) {
	// One pass of encoding/json: decoding the array as raw JSON first and then again into
	// ackJSON validated and copied it twice. A type error (acknowledgments not an array of
	// objects) does not stop the decoding of the other fields, so consumerGroup is checked
	// first, as it is in every other body.
	var req struct {
		ConsumerGroup   json.RawMessage `json:"consumerGroup"`
		Acknowledgments []ackJSON       `json:"acknowledgments"`
	}
	err := parseBody(body, &req)
	var typeErr *json.UnmarshalTypeError
	if err != nil && !errors.As(err, &typeErr) {
		return nil, err
	}
	group, gerr := stringField(req.ConsumerGroup, "consumerGroup", "")
	if gerr != nil {
		return nil, gerr
	}
	raw := req.Acknowledgments
	if err != nil || raw == nil {
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
		Operations     json.RawMessage `json:"operations"`
		RequiredLeases json.RawMessage `json:"requiredLeases"`
	}
	if err := parseBody(body, &req); err != nil {
		return nil, err
	}
	held, err := decodeRequiredLeases(req.RequiredLeases)
	if err != nil {
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
			if a.LeaseID == "" {
				a.HeldLeases = held
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

// decodeRequiredLeases reads a transaction's requiredLeases: the leases of the messages its
// acks name, which the official clients send here instead of on each ack operation. The
// reference ignores the field; here it is the proof that lets an ack without leaseId apply
// under a lease in force. Empty and null entries prove nothing and are skipped.
func decodeRequiredLeases(raw json.RawMessage) ([]string, error) {
	entries, err := arrayField(raw, "requiredLeases")
	if err != nil {
		return nil, err
	}
	var out []string
	for i, e := range entries {
		field := "requiredLeases[" + strconv.Itoa(i) + "]"
		s, err := stringField(e, field, "")
		if err != nil {
			return nil, err
		}
		if s == "" {
			continue
		}
		id, err := uuid.Parse(s)
		if err != nil {
			return nil, badf(field + " must be a lease id (a UUID)")
		}
		out = append(out, id.String())
	}
	return out, nil
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

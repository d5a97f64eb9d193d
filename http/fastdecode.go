package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	"queen/persistence"
)

// The push and ack-batch bodies are most of what the broker decodes, and encoding/json read
// each twice (its validity scan, then the reflective decode, copying every field into a
// json.RawMessage): a third of the broker's CPU in the cost cycle. The readers here check the
// body (validJSON), then take the common shape of those bodies in one scan, cutting the fields
// out of the body instead of copying them, and hand them to the same per-item validation.
// Anything they cannot read exactly as encoding/json would (a key with an escape or outside
// ASCII, a key that matches a field only case-insensitively, a field given twice, a value of
// another type where an array or object is expected, invalid JSON) sends the body down the
// encoding/json path instead, which answers it as it always did.

// fastFields reads the object at b[i] (b is valid JSON) and stores the value of each field
// named in names at the same index of out, as encoding/json would fill json.RawMessage fields.
// It returns the index after the object, and false when the object is not one it can read
// exactly as encoding/json would.
func fastFields(b []byte, i int, names []string, out []json.RawMessage) (int, bool) {
	return fastElements(b, i, '{', '}', func(i int) (int, bool) {
		if b[i] != '"' {
			return i, false
		}
		end := bytes.IndexByte(b[i+1:], '"')
		if end < 0 {
			return i, false
		}
		key := b[i+1 : i+1+end]
		if !plainASCII(key) {
			return i, false
		}
		i = skipJSONSpace(b, i+end+2)
		if i >= len(b) || b[i] != ':' {
			return i, false
		}
		start := skipJSONSpace(b, i+1)
		i = skipJSONValue(b, start)
		for k, name := range names {
			switch {
			case string(key) == name && out[k] == nil:
				out[k] = b[start:i]
				return i, true
			case bytes.EqualFold(key, []byte(name)):
				// A field given twice, or a key encoding/json would match by its own rule.
				return i, false
			}
		}
		return i, true // a field the route does not read
	})
}

// fastArray calls each with the position n and the index of every element of the array at
// b[i] (valid JSON) and returns the index after it; false when b[i] is not an array or each
// refused an element.
func fastArray(b []byte, i int, each func(n, at int) (int, bool)) (int, bool) {
	n := 0
	return fastElements(b, i, '[', ']', func(at int) (int, bool) {
		n++
		return each(n-1, at)
	})
}

// fastElements calls each with the index of every member or element of the object or array
// (open, close) at b[i], b being valid JSON, and returns the index after it; false when b[i]
// is not one or each refused.
func fastElements(b []byte, i int, open, close byte, each func(at int) (int, bool)) (int, bool) {
	i = skipJSONSpace(b, i)
	if i >= len(b) || b[i] != open {
		return i, false
	}
	i = skipJSONSpace(b, i+1)
	if i < len(b) && b[i] == close {
		return i + 1, true
	}
	for i < len(b) {
		var ok bool
		if i, ok = each(i); !ok {
			return i, false
		}
		i = skipJSONSpace(b, i)
		switch {
		case i < len(b) && b[i] == ',':
			i = skipJSONSpace(b, i+1)
		case i < len(b) && b[i] == close:
			return i + 1, true
		default:
			return i, false
		}
	}
	return i, false
}

// plainASCII reports whether a key is printable ASCII without escapes: encoding/json matches
// such a key to a field name by the same bytes or by ASCII case folding only.
func plainASCII(key []byte) bool {
	for _, c := range key {
		if c < 0x20 || c >= 0x7f || c == '\\' {
			return false
		}
	}
	return true
}

func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipJSONValue returns the index after the value that starts at b[i], b being valid JSON.
func skipJSONValue(b []byte, i int) int {
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '"':
			i = skipJSONString(b, i)
		case '{', '[':
			depth++
			i++
		case '}', ']':
			depth--
			i++
		default: // a number, true, false or null
			for i < len(b) && !endsScalar(b[i]) {
				i++
			}
		}
		if depth == 0 {
			return i
		}
		i = skipJSONSpace(b, i)
		if i < len(b) && (b[i] == ',' || b[i] == ':') {
			i++
		}
	}
	return i
}

func endsScalar(c byte) bool {
	return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\r' || c == '\n'
}

// skipJSONString returns the index after the string that starts at b[i]: the first quote
// after an even run of backslashes.
func skipJSONString(b []byte, i int) int {
	start := i + 1
	for i = start; ; {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		q, escapes := i+j, 0
		for k := q - 1; k >= start && b[k] == '\\'; k-- {
			escapes++
		}
		i = q + 1
		if escapes%2 == 0 {
			return i
		}
	}
}

// inField puts prefix, the position of an item, in front of the text of a 400 that names one
// of the item's fields.
func inField(prefix string, err error) error {
	var bad *badRequest
	if errors.As(err, &bad) {
		return badf(prefix + bad.msg)
	}
	return err
}

var pushFields = []string{"queue", "partition", "payload", "data", "transactionId", "traceId"}

// fastPush decodes a push body of the common shape; handled is false when decodePush must
// take it the encoding/json way. The body is copied once: payloads are cut out of the copy and
// outlive the request, whose buffer the server reuses.
func fastPush(body []byte) (items []pushItem, handled bool, err error) {
	if !validJSON(body) {
		return nil, false, nil
	}
	body = bytes.Clone(body)
	top := []json.RawMessage{nil}
	if _, ok := fastFields(body, 0, []string{"items"}, top); !ok || top[0] == nil {
		return nil, false, nil
	}
	list := top[0]
	fields := make([]json.RawMessage, len(pushFields))
	_, ok := fastArray(list, 0, func(n, at int) (int, bool) {
		clear(fields)
		end, ok := fastFields(list, at, pushFields, fields)
		if !ok || err != nil {
			return end, ok
		}
		raw := pushItemJSON{Queue: fields[0], Partition: fields[1], Payload: fields[2], Data: fields[3],
			TransactionID: fields[4], TraceID: fields[5]}
		// The item's position is put in front of an error's text only when there is one:
		// building "items[n].field" for every field cost more than the rest of the decode.
		it, ierr := decodePushItem(&raw, "")
		if ierr != nil {
			err = inField("items["+strconv.Itoa(n)+"].", ierr)
		}
		items = append(items, it)
		return end, true
	})
	if !ok {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err
	}
	if items == nil {
		items = []pushItem{}
	}
	return items, true, nil
}

var ackFields = []string{"transactionId", "partitionId", "status", "consumerGroup", "leaseId", "error"}

// fastAckBatch decodes an /ack/batch body of the common shape; handled is false when
// decodeAckBatch must take it the encoding/json way. Every field becomes a string of its own,
// so nothing refers to the request's buffer.
func fastAckBatch(body []byte) (acks []persistence.AckItem, handled bool, err error) {
	if !validJSON(body) {
		return nil, false, nil
	}
	top := []json.RawMessage{nil, nil}
	if _, ok := fastFields(body, 0, []string{"consumerGroup", "acknowledgments"}, top); !ok || top[1] == nil {
		return nil, false, nil
	}
	group, gerr := stringField(top[0], "consumerGroup", "")
	list := top[1]
	fields := make([]json.RawMessage, len(ackFields))
	_, ok := fastArray(list, 0, func(n, at int) (int, bool) {
		clear(fields)
		end, ok := fastFields(list, at, ackFields, fields)
		if !ok || err != nil || gerr != nil {
			return end, ok
		}
		raw := ackJSON{TransactionID: fields[0], PartitionID: fields[1], Status: fields[2], ConsumerGroup: fields[3],
			LeaseID: fields[4], Error: fields[5]}
		a, aerr := decodeAck(&raw, "", group) // see fastPush on the position
		if aerr != nil {
			err = inField("acknowledgments["+strconv.Itoa(n)+"].", aerr)
		}
		acks = append(acks, a)
		return end, true
	})
	switch {
	case !ok:
		return nil, false, nil
	case gerr != nil:
		return nil, true, gerr
	case err != nil:
		return nil, true, err
	case acks == nil:
		return []persistence.AckItem{}, true, nil
	}
	return acks, true, nil
}

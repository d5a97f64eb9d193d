package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"sync"

	"queen/jsonscan"
	"queen/persistence"
)

// The push and ack-batch bodies are most of what the broker decodes, and encoding/json read
// each twice (its validity scan, then the reflective decode, copying every field into a
// json.RawMessage): a third of the broker's CPU in the cost cycle. The readers here check the
// body (jsonscan.Valid), then take the common shape of those bodies in one scan, cutting the fields
// out of the body instead of copying them, and hand them to the same per-item validation.
// Anything they cannot read exactly as encoding/json would (a key with an escape or outside
// ASCII, a key that matches a field only case-insensitively, a field given twice, a value of
// another type where an array or object is expected, invalid JSON) sends the body down the
// encoding/json path instead, which answers it as it always did.

// inField puts prefix, the position of an item, in front of the text of a 400 that names one
// of the item's fields.
func inField(prefix string, err error) error {
	var bad *badRequest
	if errors.As(err, &bad) {
		return badf(prefix + bad.msg)
	}
	return err
}

// scratch holds a decode's entries until their number is known, so the slice handed on is
// allocated once, at its length: appending to an empty slice allocated 2.5 times the entries
// of a push of 100, and the items and acks so grown were a sixth of everything the broker
// allocated in bench cost.
type scratch[T any] struct{ pool sync.Pool }

func (s *scratch[T]) get() *[]T {
	if p, ok := s.pool.Get().(*[]T); ok {
		return p
	}
	return new([]T)
}

// keep returns a copy of the entries the decode appended to *p, never nil, and gives p back.
// The entries point into the request's body: they are cleared before p goes back.
func (s *scratch[T]) keep(p *[]T) []T {
	out := make([]T, len(*p))
	copy(out, *p)
	clear(*p)
	*p = (*p)[:0]
	s.pool.Put(p)
	return out
}

var (
	pushScratch scratch[pushItem]
	ackScratch  scratch[persistence.AckItem]
)

var pushFields = []string{"queue", "partition", "payload", "data", "transactionId", "traceId"}

// fastPush decodes a push body of the common shape; handled is false when decodePush must
// take it the encoding/json way. The body is copied once: payloads are cut out of the copy and
// outlive the request, whose buffer the server reuses.
func fastPush(body []byte) (items []pushItem, handled bool, err error) {
	if !jsonscan.Valid(body) {
		return nil, false, nil
	}
	body = bytes.Clone(body)
	top := []json.RawMessage{nil}
	if _, ok := jsonscan.Fields(body, 0, []string{"items"}, top); !ok || top[0] == nil {
		return nil, false, nil
	}
	list := top[0]
	fields := make([]json.RawMessage, len(pushFields))
	decoded := pushScratch.get()
	_, ok := jsonscan.Array(list, 0, func(n, at int) (int, bool) {
		clear(fields)
		end, ok := jsonscan.Fields(list, at, pushFields, fields)
		if !ok || err != nil {
			return end, ok
		}
		raw := pushItemJSON{Queue: fields[0], Partition: fields[1], Payload: fields[2], Data: fields[3],
			TransactionID: fields[4], TraceID: fields[5]}
		// The item's position is put in front of an error's text only when there is one:
		// building "items[n].field" for every field cost more than the rest of the decode.
		var prev *pushItem
		if n > 0 {
			prev = &(*decoded)[n-1]
		}
		it, ierr := decodePushItemAfter(&raw, "", prev)
		if ierr != nil {
			err = inField("items["+strconv.Itoa(n)+"].", ierr)
		}
		*decoded = append(*decoded, it)
		return end, true
	})
	items = pushScratch.keep(decoded)
	if !ok {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err
	}
	return items, true, nil
}

var ackFields = []string{"transactionId", "partitionId", "status", "consumerGroup", "leaseId", "error"}

// fastAckBatch decodes an /ack/batch body of the common shape; handled is false when
// decodeAckBatch must take it the encoding/json way. Every field becomes a string of its own,
// so nothing refers to the request's buffer.
func fastAckBatch(body []byte) (acks []persistence.AckItem, handled bool, err error) {
	if !jsonscan.Valid(body) {
		return nil, false, nil
	}
	top := []json.RawMessage{nil, nil}
	if _, ok := jsonscan.Fields(body, 0, []string{"consumerGroup", "acknowledgments"}, top); !ok || top[1] == nil {
		return nil, false, nil
	}
	group, gerr := stringField(top[0], "consumerGroup", "")
	list := top[1]
	fields := make([]json.RawMessage, len(ackFields))
	decoded := ackScratch.get()
	_, ok := jsonscan.Array(list, 0, func(n, at int) (int, bool) {
		clear(fields)
		end, ok := jsonscan.Fields(list, at, ackFields, fields)
		if !ok || err != nil || gerr != nil {
			return end, ok
		}
		raw := ackJSON{TransactionID: fields[0], PartitionID: fields[1], Status: fields[2], ConsumerGroup: fields[3],
			LeaseID: fields[4], Error: fields[5]}
		var prev *persistence.AckItem
		if n > 0 {
			prev = &(*decoded)[n-1]
		}
		a, aerr := decodeAckAfter(&raw, "", group, prev) // see fastPush on the position
		if aerr != nil {
			err = inField("acknowledgments["+strconv.Itoa(n)+"].", aerr)
		}
		*decoded = append(*decoded, a)
		return end, true
	})
	acks = ackScratch.keep(decoded)
	switch {
	case !ok:
		return nil, false, nil
	case gerr != nil:
		return nil, true, gerr
	case err != nil:
		return nil, true, err
	}
	return acks, true, nil
}

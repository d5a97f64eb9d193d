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
// json.RawMessage): a third of the broker's CPU in the cost cycle. The readers here take the
// common shape of those bodies in one pass that also checks the syntax (jsonscan), cutting the
// fields out of the body instead of copying them, and hand them to the same per-item validation.
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
	s.release(p)
	return out
}

// release gives p back, its entries cleared.
func (s *scratch[T]) release(p *[]T) {
	clear(*p)
	*p = (*p)[:0]
	s.pool.Put(p)
}

var (
	pushScratch   scratch[pushItem]
	ackScratch    scratch[persistence.AckItem]
	ackRawScratch scratch[ackJSON]
)

var (
	pushTopFields = []string{"items"}
	pushFields    = []string{"queue", "partition", "payload", "data", "transactionId", "traceId"}
)

// fastPush decodes a push body of the common shape; handled is false when decodePush must
// take it the encoding/json way. The body is copied once: payloads are cut out of the copy and
// outlive the request, whose buffer the server reuses.
func fastPush(body []byte) (items []pushItem, handled bool, err error) {
	body = bytes.Clone(body)
	fields := make([]json.RawMessage, len(pushFields))
	decoded := pushScratch.get()
	sawItems := false
	end, ok := jsonscan.Object(body, 0, 0, pushTopFields, func(_, at int) (int, bool) {
		sawItems = true
		return jsonscan.Array(body, at, 1, func(n, at int) (int, bool) {
			clear(fields)
			end, ok := jsonscan.Fields(body, at, 2, pushFields, fields)
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
	})
	items = pushScratch.keep(decoded)
	if !ok || !sawItems || !jsonscan.End(body, end) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err
	}
	return items, true, nil
}

var (
	ackTopFields = []string{"consumerGroup", "acknowledgments"}
	ackFields    = []string{"transactionId", "partitionId", "status", "consumerGroup", "leaseId", "error"}
)

// fastAckBatch decodes an /ack/batch body of the common shape; handled is false when
// decodeAckBatch must take it the encoding/json way. The clients send the acknowledgments
// before the top-level consumerGroup that applies to each, so the pass over the body keeps
// each item's fields, and the items are decoded once the group is known. Every field becomes
// a string of its own, so nothing refers to the request's buffer.
func fastAckBatch(body []byte) (acks []persistence.AckItem, handled bool, err error) {
	var group json.RawMessage
	fields := make([]json.RawMessage, len(ackFields))
	raws := ackRawScratch.get()
	defer ackRawScratch.release(raws)
	sawList := false
	end, ok := jsonscan.Object(body, 0, 0, ackTopFields, func(k, at int) (int, bool) {
		if k == 0 {
			end, ok := jsonscan.Value(body, at, 1)
			group = body[at:end]
			return end, ok
		}
		sawList = true
		return jsonscan.Array(body, at, 1, func(_, at int) (int, bool) {
			clear(fields)
			end, ok := jsonscan.Fields(body, at, 2, ackFields, fields)
			*raws = append(*raws, ackJSON{TransactionID: fields[0], PartitionID: fields[1], Status: fields[2],
				ConsumerGroup: fields[3], LeaseID: fields[4], Error: fields[5]})
			return end, ok
		})
	})
	if !ok || !sawList || !jsonscan.End(body, end) {
		return nil, false, nil
	}
	g, err := stringField(group, "consumerGroup", "")
	if err != nil {
		return nil, true, err
	}
	decoded := ackScratch.get()
	for n := range *raws {
		var prev *persistence.AckItem
		if n > 0 {
			prev = &(*decoded)[n-1]
		}
		a, aerr := decodeAckAfter(&(*raws)[n], "", g, prev) // see fastPush on the position
		if aerr != nil {
			ackScratch.release(decoded)
			return nil, true, inField("acknowledgments["+strconv.Itoa(n)+"].", aerr)
		}
		*decoded = append(*decoded, a)
	}
	return ackScratch.keep(decoded), true, nil
}

package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"queen/fusion"
)

// spoolRecord is a PushItem as the disk spool stores it: the reference's event fields, JSON.
// The queue is its stored name. The payload is embedded verbatim (for an encrypted queue it is
// already the sealed envelope), and the original transactionId makes the replay idempotent.
type spoolRecord struct {
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	TransactionID string          `json:"transactionId"`
	TraceID       string          `json:"traceId,omitempty"`
	ProducerSub   *string         `json:"producerSub,omitempty"`
	Encrypted     bool            `json:"encrypted,omitempty"`
	Payload       json.RawMessage `json:"payload"`
}

// EncodeSpoolRecord turns an item into a spool record.
func EncodeSpoolRecord(it PushItem) ([]byte, error) {
	r := spoolRecord{
		Queue: it.Queue.Stored(), Partition: it.Partition, TransactionID: it.TransactionID,
		Encrypted: it.Encrypted, Payload: it.Payload,
	}
	if it.TraceID.Valid {
		r.TraceID = it.TraceID.UUID.String()
	}
	if it.ProducerSub != "" {
		r.ProducerSub = &it.ProducerSub
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("cannot encode spool record for %s/%s: %w", it.Queue, it.Partition, err)
	}
	return b, nil
}

// DecodeSpoolRecord reads a spool record back. Records come from the broker's own files, but a
// damaged or hand-edited file must be refused, not stored.
func DecodeSpoolRecord(b []byte) (PushItem, error) {
	var r spoolRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return PushItem{}, fmt.Errorf("cannot decode spool record: %w", err)
	}
	if r.Queue == "" || r.Partition == "" || r.TransactionID == "" || len(r.Payload) == 0 {
		return PushItem{}, errors.New("cannot decode spool record: queue, partition, transactionId and payload are required")
	}
	it := PushItem{
		Queue: ParseQueueName(r.Queue), Partition: r.Partition, TransactionID: r.TransactionID,
		Encrypted: r.Encrypted, Payload: r.Payload,
	}
	if r.TraceID != "" {
		id, err := uuid.Parse(r.TraceID)
		if err != nil {
			return PushItem{}, fmt.Errorf("cannot decode spool record: bad traceId: %w", err)
		}
		it.TraceID = uuid.NullUUID{UUID: id, Valid: true}
	}
	if r.ProducerSub != nil {
		it.ProducerSub = *r.ProducerSub
	}
	return it, nil
}

// Replayed is what a replay of spool records stored: the partitions that received messages,
// by queue (their parked pops are woken).
type Replayed map[QueueName][]string

// Replay stores one batch of spool records in one transaction, as the push batcher would, with
// its retry of each record alone when the transaction fails (fusion.Run), so one record the
// database refuses for good cannot hold back the others. The original transactionIds make it
// idempotent: a record already stored (a crash after commit, or a push that committed after it
// was spooled) answers duplicate and is not stored twice. refused names the records that must
// not be retried, by index, with the reason; err is set only when PostgreSQL is unavailable,
// and then nothing is refused.
func (s *Store) Replay(ctx context.Context, records [][]byte) (stored Replayed, refused map[int]string, err error) {
	refused = map[int]string{}
	stored = Replayed{}
	var jobs []fusion.Job[PushItem, PushResult]
	for i, rec := range records {
		it, derr := DecodeSpoolRecord(rec)
		if derr != nil {
			refused[i] = derr.Error()
			continue
		}
		jobs = append(jobs, fusion.Job[PushItem, PushResult]{
			Items: []PushItem{it},
			Done: func(res []PushResult, jerr error) {
				switch {
				case jerr != nil && IsUnavailable(jerr):
					err = jerr
				case jerr != nil:
					refused[i] = jerr.Error()
				case res[0].Status == StatusFailed:
					// A clear record for a queue flagged encrypted since, and no key: keep it
					// out of the database, in the failed records, rather than store it in clear.
					refused[i] = res[0].Error
				case res[0].Status == StatusQueued:
					stored[it.Queue] = append(stored[it.Queue], it.Partition)
				}
			},
		})
	}
	if len(jobs) > 0 {
		fusion.Run(ctx, jobs, s.Push, IsUnavailable)
	}
	if err != nil {
		return nil, nil, err
	}
	return stored, refused, nil
}

package persistence

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// spoolRecord is a PushItem as the disk spool stores it: the reference's event fields, JSON.
// The payload is embedded verbatim (for an encrypted queue it is already the sealed envelope),
// and the original transactionId makes the replay idempotent.
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
		Queue: it.Queue, Partition: it.Partition, TransactionID: it.TransactionID,
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
		Queue: r.Queue, Partition: r.Partition, TransactionID: r.TransactionID,
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

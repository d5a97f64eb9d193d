package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// PayloadOpener returns a sealed payload in clear (seal.Key implements it); queue is the stored
// name the envelope is bound to.
type PayloadOpener interface {
	Open(stored []byte, queue, transactionID string) (json.RawMessage, error)
}

// ErrSealedPayload is returned when a dead letter's payload is sealed and cannot be opened: its
// copy needs a new envelope bound to the new transactionId, which needs the payload in clear.
var ErrSealedPayload = errors.New("the dead letter's payload is encrypted and cannot be opened with QUEEN_ENCRYPTION_KEY")

// ErrReplayRefused is a copy the queue refuses: it requires encryption and the broker has no key.
var ErrReplayRefused = errors.New("the queue refuses the copy of the dead letter")

// DeadLetterReplay is what ReplayDeadLetter did; Found is false when no dead letter of the caller's
// tenant matched.
type DeadLetterReplay struct {
	Found         bool
	Queue         QueueName
	Partition     string
	Result        PushResult
	TransactionID string // the copy's
}

// replaySuffix joins an original transactionId to the dead-letter entry id in the copy's.
const replaySuffix = ":replay:"

// ReplayDeadLetter pushes a copy of the dead-lettered message (partitionID, transactionID) into
// its queue and partition and removes its dead-letter entries (one per consumer group that gave
// up on it), in one transaction. The copy goes through the push path (pushInTx: partition lock,
// the next sequence number, the transactionId dedup, sealing for encrypted queues), so every
// consumer group reads it as a new message. Its transactionId is derived from the original and
// the dead-letter entry, so the same entry can never be pushed twice.
func (s *Store) ReplayDeadLetter(ctx context.Context, scope Scope, partitionID uuid.UUID, transactionID string, open PayloadOpener) (DeadLetterReplay, error) {
	var out DeadLetterReplay
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		out = DeadLetterReplay{}
		// Deleting first takes the entries' row locks: a concurrent replay of the same dead
		// letter waits here, then finds nothing to delete.
		var entry pgtype.Text
		var seq pgtype.Int8
		err := tx.QueryRow(ctx, `
			WITH gone AS (
				DELETE FROM queen.dead_letter_queue d
				USING queen.message_transactions m, queen.partitions p, queen.queues q
				WHERE m.partition_id = $1 AND m.transaction_id = $2
				  AND d.partition_id = m.partition_id AND d.message_seq = m.seq
				  AND p.id = m.partition_id AND q.id = p.queue_id AND `+inScope("q.name", "$3")+`
				RETURNING d.id, d.message_seq)
			SELECT min(id::text), min(message_seq) FROM gone`, partitionID, transactionID, scope.Tenant).Scan(&entry, &seq)
		if err != nil {
			return fmt.Errorf("cannot remove the dead letter %s/%s: %w", partitionID, transactionID, err)
		}
		if !entry.Valid {
			return nil
		}
		var it PushItem
		var trace pgtype.UUID
		var sub pgtype.Text
		var encrypted bool
		err = tx.QueryRow(ctx, `
			SELECT q.name, p.name, m.payload, m.is_encrypted, m.trace_id, m.producer_sub
			FROM queen.message_at($1, $2) m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id`, partitionID, seq.Int64).
			Scan(&it.Queue, &it.Partition, &it.Payload, &encrypted, &trace, &sub)
		if err != nil {
			return fmt.Errorf("cannot read the dead letter %s/%s: %w", partitionID, transactionID, err)
		}
		if encrypted {
			if open == nil {
				return ErrSealedPayload
			}
			if it.Payload, err = open.Open(it.Payload, it.Queue.Stored(), transactionID); err != nil {
				return fmt.Errorf("%w: %w", ErrSealedPayload, err)
			}
		}
		it.TransactionID = replayTransactionID(transactionID, entry.String)
		it.TraceID = uuid.NullUUID{UUID: trace.Bytes, Valid: trace.Valid}
		it.ProducerSub = sub.String
		res, err := pushInTx(ctx, tx, tx.Conn().TypeMap(), []PushItem{it}, pushOptions{lookUp: true}, s.sealer)
		if err != nil {
			return fmt.Errorf("cannot push the copy of %s/%s: %w", partitionID, transactionID, err)
		}
		if res[0].Status == StatusFailed {
			return fmt.Errorf("%w: %s", ErrReplayRefused, res[0].Error)
		}
		out = DeadLetterReplay{Found: true, Queue: it.Queue, Partition: it.Partition, Result: res[0], TransactionID: it.TransactionID}
		return nil
	})
	return out, err
}

// replayTransactionID is the copy's transactionId: the original, cut at a character boundary
// so that the whole fits the 255-character column, then the suffix and the entry id.
func replayTransactionID(original, entry string) string {
	suffix := replaySuffix + entry
	room := maxTransactionID - utf8.RuneCountInString(suffix)
	if utf8.RuneCountInString(original) > room {
		original = string([]rune(original)[:room])
	}
	return original + suffix
}

// maxTransactionID is the length queen.message_transactions.transaction_id allows.
const maxTransactionID = 255

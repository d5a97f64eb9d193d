package persistence

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PayloadSealer encrypts a payload into its stored envelope, bound to the message transactionID
// of queue (its stored name), so that the envelope opens for that message only (seal.Key
// implements it).
type PayloadSealer interface {
	Seal(payload []byte, queue, transactionID string) (json.RawMessage, error)
}

// SetSealer gives the store the payload key (QUEEN_ENCRYPTION_KEY). Call it before the store is
// used; without it, a push to a queue flagged encryptionEnabled is refused, never stored in clear.
func (s *Store) SetSealer(k PayloadSealer) { s.sealer = k }

// EncryptionRequired is the reason a push to an encrypted queue is refused without a key; a
// tenant's queue is named as its tenant knows it.
func EncryptionRequired(queue QueueName) string {
	return fmt.Sprintf("queue %s requires encryption but QUEEN_ENCRYPTION_KEY is not set", queue.Name)
}

// sealForQueue returns the payload to store for an item of a queue whose encryption_enabled is
// flagged: items the HTTP layer sealed already pass as they are; the others (a stale flag cache,
// a spooled record replayed after the queue was flagged) are sealed here, inside the push
// transaction that read the flag. refused is set when there is no key.
func sealForQueue(sealer PayloadSealer, it *PushItem) (payload json.RawMessage, refused string, err error) {
	if it.Encrypted {
		return it.Payload, "", nil
	}
	if sealer == nil {
		return nil, EncryptionRequired(it.Queue), nil
	}
	env, err := sealer.Seal(it.Payload, it.Queue.Stored(), it.TransactionID)
	if err != nil {
		return nil, "", fmt.Errorf("cannot encrypt a payload for queue %s: %w", it.Queue, err)
	}
	return env, "", nil
}

// EncryptedQueues lists the queues configured with encryptionEnabled.
func (s *Store) EncryptedQueues(ctx context.Context) ([]QueueName, error) {
	rows, err := s.pool.Query(ctx, `SELECT name FROM queen.queues WHERE encryption_enabled`)
	if err != nil {
		return nil, fmt.Errorf("cannot list the encrypted queues: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[QueueName])
	if err != nil {
		return nil, fmt.Errorf("cannot list the encrypted queues: %w", err)
	}
	return names, nil
}

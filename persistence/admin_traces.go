package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// TraceRecord is one trace event to store against a message.
type TraceRecord struct {
	PartitionID   uuid.UUID
	TransactionID string
	Group         string
	EventType     string
	Data          json.RawMessage
	Names         []string
	WorkerID      string
}

// RecordTrace stores a trace event and returns its id; ok is false when the message does not
// exist on a queue in scope.
func (s *Store) RecordTrace(ctx context.Context, scope Scope, r TraceRecord) (id uuid.UUID, ok bool, err error) {
	names := r.Names
	if names == nil {
		names = []string{}
	}
	err = s.pool.QueryRow(ctx, `
		INSERT INTO queen.message_traces (partition_id, message_seq, transaction_id, consumer_group, event_type, data, trace_names, worker_id)
		SELECT m.partition_id, m.seq, m.transaction_id, $3, $4, $5, $6, $7
		FROM queen.message_transactions m
		JOIN queen.partitions p ON p.id = m.partition_id
		JOIN queen.queues q ON q.id = p.queue_id
		WHERE m.partition_id = $1 AND m.transaction_id = $2 AND `+inScope("q.name", "$8")+`
		RETURNING id`, r.PartitionID, r.TransactionID, r.Group, r.EventType, r.Data, names, r.WorkerID, scope.Tenant).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return id, false, nil
	}
	if err != nil {
		return id, false, fmt.Errorf("cannot record a trace of message %s/%s: %w", r.PartitionID, r.TransactionID, err)
	}
	return id, true, nil
}

// Trace is one stored trace event.
type Trace struct {
	ID        uuid.UUID
	EventType string
	Data      json.RawMessage
	Group     string
	WorkerID  *string
	CreatedAt time.Time
	Names     []string
}

// MessageTraces returns the trace events of a message, oldest first; none when the message is
// not on a queue in scope.
func (s *Store) MessageTraces(ctx context.Context, scope Scope, partitionID uuid.UUID, transactionID string) ([]Trace, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT t.id, t.event_type, t.data, t.consumer_group, t.worker_id, t.created_at, t.trace_names
		FROM queen.message_transactions m
		JOIN queen.partitions p ON p.id = m.partition_id
		JOIN queen.queues q ON q.id = p.queue_id
		JOIN queen.message_traces t ON t.partition_id = m.partition_id AND t.message_seq = m.seq
		WHERE m.partition_id = $1 AND m.transaction_id = $2 AND `+inScope("q.name", "$3")+`
		ORDER BY t.created_at, t.id`, partitionID, transactionID, scope.Tenant)
	if err != nil {
		return nil, fmt.Errorf("cannot read the traces of message %s/%s: %w", partitionID, transactionID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Trace, error) {
		var t Trace
		err := row.Scan(&t.ID, &t.EventType, &t.Data, &t.Group, &t.WorkerID, &t.CreatedAt, &t.Names)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("cannot read the traces of message %s/%s: %w", partitionID, transactionID, err)
	}
	return out, nil
}

// NamedTrace is a trace event found by name, with its message.
type NamedTrace struct {
	Trace
	TransactionID string
	PartitionID   uuid.UUID
	Queue         QueueName
	Partition     string
	Payload       json.RawMessage
	Encrypted     bool // Payload is a sealed envelope (queen.messages.is_encrypted)
}

// TracesByName returns one page of the trace events carrying name, newest first, and how many
// there are in all.
// Only traces of messages on the queues in scope count.
func (s *Store) TracesByName(ctx context.Context, scope Scope, name string, limit, offset int) ([]NamedTrace, int64, error) {
	rows, err := s.pool.Query(ctx, `
		WITH f AS (SELECT t.* FROM queen.message_traces t
			JOIN queen.partitions p ON p.id = t.partition_id
			JOIN queen.queues q ON q.id = p.queue_id
			WHERE t.trace_names @> ARRAY[$1::text] AND `+inScope("q.name", "$4")+`),
		page AS (SELECT * FROM f ORDER BY created_at DESC, id LIMIT $2 OFFSET $3)
		SELECT (SELECT count(*) FROM f), t.id, t.event_type, t.data, t.consumer_group, t.worker_id, t.created_at,
		       t.trace_names, t.transaction_id, t.partition_id, q.name, p.name, m.payload, m.is_encrypted
		FROM (SELECT 1) one
		LEFT JOIN (page t
			CROSS JOIN LATERAL queen.message_at(t.partition_id, t.message_seq) m
			JOIN queen.partitions p ON p.id = t.partition_id
			JOIN queen.queues q ON q.id = p.queue_id) ON true
		ORDER BY t.created_at DESC, t.id`, name, limit, offset, scope.Tenant)
	if err != nil {
		return nil, 0, fmt.Errorf("cannot read the traces named %q: %w", name, err)
	}
	defer rows.Close()
	var total int64
	out := []NamedTrace{}
	for rows.Next() {
		var t NamedTrace
		var id, pid pgtype.UUID
		var event, group, txID, partition pgtype.Text
		var created pgtype.Timestamptz
		var encrypted pgtype.Bool
		if err := rows.Scan(&total, &id, &event, &t.Data, &group, &t.WorkerID, &created, &t.Names, &txID, &pid,
			&t.Queue, &partition, &t.Payload, &encrypted); err != nil {
			return nil, 0, fmt.Errorf("cannot read the traces named %q: %w", name, err)
		}
		if !id.Valid {
			continue // the empty page
		}
		t.ID, t.PartitionID = id.Bytes, pid.Bytes
		t.EventType, t.Group, t.TransactionID, t.Partition = event.String, group.String, txID.String, partition.String
		t.CreatedAt = created.Time
		t.Encrypted = encrypted.Bool
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("cannot read the traces named %q: %w", name, err)
	}
	return out, total, nil
}

// TraceName is one trace name in use.
type TraceName struct {
	Name     string
	Traces   int64
	Messages int64
	LastSeen time.Time
}

// TraceNames returns one page of the trace names in use, most recently seen first, and how many
// there are in all.
// Only traces of messages on the queues in scope count.
func (s *Store) TraceNames(ctx context.Context, scope Scope, limit, offset int) ([]TraceName, int64, error) {
	rows, err := s.pool.Query(ctx, `
		WITH f AS (
			SELECT n.name, count(*) AS traces, count(DISTINCT (t.partition_id, t.message_seq)) AS messages,
			       max(t.created_at) AS last_seen
			FROM queen.message_traces t CROSS JOIN LATERAL unnest(t.trace_names) AS n(name)
			JOIN queen.partitions p ON p.id = t.partition_id
			JOIN queen.queues q ON q.id = p.queue_id
			WHERE `+inScope("q.name", "$3")+`
			GROUP BY n.name),
		page AS (SELECT * FROM f ORDER BY last_seen DESC, name LIMIT $1 OFFSET $2)
		SELECT (SELECT count(*) FROM f), page.name, page.traces, page.messages, page.last_seen
		FROM (SELECT 1) one LEFT JOIN page ON true
		ORDER BY page.last_seen DESC, page.name`, limit, offset, scope.Tenant)
	if err != nil {
		return nil, 0, fmt.Errorf("cannot list trace names: %w", err)
	}
	defer rows.Close()
	var total int64
	out := []TraceName{}
	for rows.Next() {
		var n pgtype.Text
		var traces, messages pgtype.Int8
		var last pgtype.Timestamptz
		if err := rows.Scan(&total, &n, &traces, &messages, &last); err != nil {
			return nil, 0, fmt.Errorf("cannot list trace names: %w", err)
		}
		if !n.Valid {
			continue // the empty page
		}
		out = append(out, TraceName{Name: n.String, Traces: traces.Int64, Messages: messages.Int64, LastSeen: last.Time})
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("cannot list trace names: %w", err)
	}
	return out, total, nil
}

package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Streams: the state of the streaming SDKs' queries (migrations/0004_streams.sql,
// docs/streams.md). A query's identity is a QueueName (its tenant and the name the tenant
// gives it), stored the way queue names are.

// StreamQuery is a query to register.
type StreamQuery struct {
	Name        QueueName
	SourceQueue QueueName
	SinkQueue   QueueName // zero when the query has no sink
	ConfigHash  string
	// Reset wipes the query's state and adopts ConfigHash when the stored hash differs.
	Reset bool
}

// RegisteredQuery is the outcome of registering a query. When Conflict is set nothing changed:
// the query exists with another hash and Reset was not asked for.
type RegisteredQuery struct {
	ID       uuid.UUID
	Fresh    bool // created by this call
	Reset    bool // its state was wiped by this call
	Conflict bool
}

// RegisterQuery creates the query, or updates its source and sink when the hash is the one
// stored, or wipes its state and adopts the new hash when Reset is set. The query row is
// locked, so a registration and a cycle of the same query do not interleave.
func (s *Store) RegisterQuery(ctx context.Context, q StreamQuery) (RegisteredQuery, error) {
	var out RegisteredQuery
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		out = RegisteredQuery{}
		var hash string
		err := tx.QueryRow(ctx, `INSERT INTO queen_streams.queries (name, source_queue, sink_queue, config_hash)
			VALUES ($1, $2, NULLIF($3, ''), $4)
			ON CONFLICT (name) DO UPDATE SET updated_at = queen_streams.queries.updated_at
			RETURNING id, config_hash, xmax = 0`,
			q.Name.Stored(), q.SourceQueue.Stored(), sinkStored(q.SinkQueue), q.ConfigHash).Scan(&out.ID, &hash, &out.Fresh)
		if err != nil {
			return fmt.Errorf("cannot register query %s: %w", q.Name, err)
		}
		if out.Fresh {
			return nil
		}
		if hash != q.ConfigHash && !q.Reset {
			out.Conflict = true
			return nil
		}
		if hash != q.ConfigHash {
			if _, err := tx.Exec(ctx, `DELETE FROM queen_streams.state WHERE query_id = $1`, out.ID); err != nil {
				return fmt.Errorf("cannot reset the state of query %s: %w", q.Name, err)
			}
			out.Reset = true
		}
		_, err = tx.Exec(ctx, `UPDATE queen_streams.queries SET source_queue = $2, sink_queue = NULLIF($3, ''),
			config_hash = $4, updated_at = now() WHERE id = $1`,
			out.ID, q.SourceQueue.Stored(), sinkStored(q.SinkQueue), q.ConfigHash)
		if err != nil {
			return fmt.Errorf("cannot update query %s: %w", q.Name, err)
		}
		return nil
	})
	return out, err
}

func sinkStored(q QueueName) string {
	if q.Name == "" {
		return ""
	}
	return q.Stored()
}

// DeletedQuery is what deleting a query removed.
type DeletedQuery struct {
	ID        uuid.UUID
	StateRows int64
	Cursors   int64 // cursors of its consumer group streams.<id> on its source queue
}

// DeleteQuery deletes the query, its state and the cursors of its consumer group on its source
// queue, in one transaction. found is false when the query does not exist in its tenant.
func (s *Store) DeleteQuery(ctx context.Context, name QueueName) (d DeletedQuery, found bool, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		var source string
		err := tx.QueryRow(ctx, `SELECT id, source_queue FROM queen_streams.queries WHERE name = $1 FOR UPDATE`,
			name.Stored()).Scan(&d.ID, &source)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cannot find query %s: %w", name, err)
		}
		found = true
		tag, err := tx.Exec(ctx, `DELETE FROM queen_streams.state WHERE query_id = $1`, d.ID)
		if err != nil {
			return fmt.Errorf("cannot delete the state of query %s: %w", name, err)
		}
		d.StateRows = tag.RowsAffected()
		group := StreamGroup(d.ID)
		tag, err = tx.Exec(ctx, `DELETE FROM queen.partition_consumers pc USING queen.partitions p, queen.queues q
			WHERE pc.partition_id = p.id AND p.queue_id = q.id AND q.name = $1 AND pc.consumer_group = $2`, source, group)
		if err != nil {
			return fmt.Errorf("cannot delete the cursors of query %s: %w", name, err)
		}
		d.Cursors = tag.RowsAffected()
		if _, err := tx.Exec(ctx, `DELETE FROM queen.consumer_groups_metadata WHERE consumer_group = $1 AND queue_name = $2`, group, source); err != nil {
			return fmt.Errorf("cannot delete the subscription of query %s: %w", name, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM queen_streams.queries WHERE id = $1`, d.ID); err != nil {
			return fmt.Errorf("cannot delete query %s: %w", name, err)
		}
		return nil
	})
	return d, found, err
}

// StreamGroup is the consumer group the SDKs pop a query's source with.
func StreamGroup(queryID uuid.UUID) string { return "streams." + queryID.String() }

// StateOp changes one key of a query's state: an upsert of Value, or a delete when Value is nil.
type StateOp struct {
	Key   string
	Value json.RawMessage
}

// StreamCycle is one cycle of a query on one source partition.
type StreamCycle struct {
	Scope       Scope
	QueryID     uuid.UUID
	PartitionID uuid.UUID
	StateOps    []StateOp
	Push        []PushItem
	Ack         *AckItem // nil when the cycle acknowledges nothing (an idle flush)
}

// CycleResult is what a committed (or refused) cycle did.
type CycleResult struct {
	SourceQueue     QueueName
	StateOpsApplied int
	Push            []PushResult
	Ack             *AckResult
}

// Refusals of a cycle, as the cycle route answers them.
const (
	ErrQueryNotFound      = "query_id not found"
	ErrNotSourcePartition = "partition_id is not a partition of the query's source queue"
)

// streamLockKey names the advisory lock of one (query $1, source partition $2). A cycle takes
// it exclusively, so two runners of one partition commit one after the other; a state read
// takes it shared, so it waits for a cycle in flight instead of returning the state that cycle
// is about to change (the SDKs' idle-flush timer reads while their main loop commits).
const streamLockKey = `hashtextextended($1::text || ':' || $2::text, 7013)`

const (
	streamLockSQL     = `SELECT pg_advisory_xact_lock(` + streamLockKey + `)`
	streamReadLockSQL = `SELECT pg_advisory_xact_lock_shared(` + streamLockKey + `)`
)

// Cycle commits a cycle in one transaction, serialised per (query, source partition): the
// state operations, then the sink pushes (as the push route stores them), then the
// acknowledgement of the source messages. When a part is refused (an unknown query, a push
// item refused, an ack on a lease no longer in force) everything rolls back and reason says
// why; err is reserved for the database itself failing.
func (s *Store) Cycle(ctx context.Context, c StreamCycle) (res CycleResult, reason string, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		res = CycleResult{}
		b := &pgx.Batch{}
		b.Queue(streamLockSQL, c.QueryID, c.PartitionID)
		b.Queue(`SELECT q.source_queue, COALESCE(src.name = q.source_queue, false)
			FROM queen_streams.queries q
			LEFT JOIN (queen.partitions p JOIN queen.queues src ON src.id = p.queue_id) ON p.id = $2
			WHERE q.id = $1 AND `+inScope("q.name", "$3"), c.QueryID, c.PartitionID, c.Scope.Tenant)
		br := tx.SendBatch(ctx, b)
		if _, err := br.Exec(); err != nil {
			br.Close()
			return fmt.Errorf("cannot lock the cycle of query %s: %w", c.QueryID, err)
		}
		var ofSource bool
		err := br.QueryRow().Scan(&res.SourceQueue, &ofSource)
		br.Close()
		if errors.Is(err, pgx.ErrNoRows) {
			return txAbort{ErrQueryNotFound}
		}
		if err != nil {
			return fmt.Errorf("cannot read query %s: %w", c.QueryID, err)
		}
		if !ofSource {
			return txAbort{ErrNotSourcePartition}
		}
		if err := applyStateOps(ctx, tx, c); err != nil {
			return err
		}
		res.StateOpsApplied = len(c.StateOps)
		if len(c.Push) > 0 {
			if res.Push, err = pushInTx(ctx, tx, tx.Conn().TypeMap(), c.Push, pushOptions{lookUp: true}, s.sealer); err != nil {
				return err
			}
			for _, r := range res.Push {
				if r.Status == StatusFailed {
					return txAbort{"push failed: " + r.Error}
				}
			}
		}
		if c.Ack != nil {
			ack, err := ackInTx(ctx, tx, []AckItem{*c.Ack}, nil, ackOptions{failedToDLQ: true})
			if err != nil {
				return err
			}
			res.Ack = &ack[0]
			if !ack[0].Success {
				return txAbort{ack[0].Error} // the reference's text, bare
			}
		}
		return nil
	})
	var abort txAbort
	if errors.As(err, &abort) {
		return res, abort.reason, nil
	}
	if err != nil {
		return res, "", fmt.Errorf("cannot commit a cycle of query %s: %w", c.QueryID, err)
	}
	return res, "", nil
}

// applyStateOps applies a cycle's state operations as if one after the other: the last
// operation on a key decides it, in one upsert and one delete statement.
func applyStateOps(ctx context.Context, tx pgx.Tx, c StreamCycle) error {
	if len(c.StateOps) == 0 {
		return nil
	}
	last := make(map[string]int, len(c.StateOps))
	for i, op := range c.StateOps {
		last[op.Key] = i
	}
	var upKeys, delKeys []string
	var upValues []json.RawMessage
	for i, op := range c.StateOps {
		if last[op.Key] != i {
			continue
		}
		if op.Value == nil {
			delKeys = append(delKeys, op.Key)
			continue
		}
		upKeys = append(upKeys, op.Key)
		upValues = append(upValues, op.Value)
	}
	b := &pgx.Batch{}
	if len(upKeys) > 0 {
		// Key order: two cycles of one query on different partitions never share a row, but a
		// fixed order costs nothing.
		b.Queue(`INSERT INTO queen_streams.state AS s (query_id, partition_id, key, value)
			SELECT $1, $2, v.k, v.val FROM unnest($3::text[], $4::jsonb[]) AS v(k, val) ORDER BY v.k
			ON CONFLICT (query_id, partition_id, key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()`,
			c.QueryID, c.PartitionID, upKeys, upValues)
	}
	if len(delKeys) > 0 {
		b.Queue(`DELETE FROM queen_streams.state WHERE query_id = $1 AND partition_id = $2 AND key = ANY($3::text[])`,
			c.QueryID, c.PartitionID, delKeys)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("cannot apply the state operations of query %s: %w", c.QueryID, err)
	}
	return nil
}

// StateFilter selects state rows of one (query, source partition).
type StateFilter struct {
	Scope       Scope
	QueryID     uuid.UUID
	PartitionID uuid.UUID
	Keys        []string // empty: every key
	KeyPrefix   string   // "" : no prefix filter
	// RipeAtOrBefore, when set, keeps only rows whose value.windowEnd is a number at most this
	// (milliseconds since the epoch): the windows an idle runner may flush.
	RipeAtOrBefore *float64
}

// StateRow is one key of a query's state.
type StateRow struct {
	Key       string
	Value     json.RawMessage
	UpdatedAt time.Time
}

// QueryState reads state rows in key order. A query of another tenant reads as no rows, as
// one that does not exist.
func (s *Store) QueryState(ctx context.Context, f StateFilter) ([]StateRow, error) {
	var ripe any
	if f.RipeAtOrBefore != nil {
		ripe = *f.RipeAtOrBefore
	}
	// One batch is one implicit transaction, so the shared lock is held until the rows are
	// read, and the read, a statement of its own, sees every cycle committed before the lock.
	b := &pgx.Batch{}
	b.Queue(streamReadLockSQL, f.QueryID, f.PartitionID)
	b.Queue(`SELECT s.key, s.value, s.updated_at
		FROM queen_streams.state s JOIN queen_streams.queries q ON q.id = s.query_id
		WHERE s.query_id = $1 AND s.partition_id = $2 AND `+inScope("q.name", "$3")+`
		  AND (cardinality($4::text[]) = 0 OR s.key = ANY($4::text[]))
		  AND starts_with(s.key, $5::text)
		  AND ($6::float8 IS NULL OR (jsonb_typeof(s.value->'windowEnd') = 'number'
		       AND (s.value->>'windowEnd')::float8 <= $6::float8))
		ORDER BY s.key`,
		f.QueryID, f.PartitionID, f.Scope.Tenant, nonNil(f.Keys), f.KeyPrefix, ripe)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("cannot wait for the cycles of query %s: %w", f.QueryID, err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("cannot read the state of query %s: %w", f.QueryID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (StateRow, error) {
		var r StateRow
		err := row.Scan(&r.Key, &r.Value, &r.UpdatedAt)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("cannot read the state of query %s: %w", f.QueryID, err)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("cannot read the state of query %s: %w", f.QueryID, err)
	}
	return out, nil
}

func nonNil(keys []string) []string {
	if keys == nil {
		return []string{}
	}
	return keys
}

// StreamMetrics is the size of one query's state, for the metrics page.
type StreamMetrics struct {
	Query QueueName
	Rows  int64
	Bytes int64 // the stored size of the values
}

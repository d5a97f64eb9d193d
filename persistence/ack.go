package persistence

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// AckStatus is what a consumer says of a message it acknowledges.
type AckStatus string

// Ack statuses, after the HTTP layer has mapped "success" to AckCompleted.
const (
	AckCompleted AckStatus = "completed"
	AckFailed    AckStatus = "failed" // redeliver, or dead-letter once the retries are spent
	AckDLQ       AckStatus = "dlq"    // dead-letter at once
	AckRetry     AckStatus = "retry"  // redeliver without spending a retry
)

// Ack error texts, as the reference sends them.
const (
	ErrMessageNotFound = "Message not found"
	ErrInvalidLease    = "Invalid or expired lease"
)

// AckItem acknowledges one message for one consumer group.
type AckItem struct {
	PartitionID   uuid.UUID
	TransactionID string
	Group         string
	LeaseID       string // the lease in force on (partition, group); "" when none is
	// HeldLeases are leases the caller proved to hold without naming one on the item: a
	// transaction's requiredLeases. An item without LeaseID applies under any of them.
	HeldLeases []string
	Status     AckStatus
	Error      string
	// Scope is the caller's tenant: a message on a queue outside it is not found, exactly as
	// one that does not exist. Fused batches mix tenants, so each item carries its own.
	Scope Scope
	// Lease says what becomes of the lease in force; the zero value is the ack routes' rule.
	Lease LeaseAfterAck
}

// LeaseAfterAck is what an acknowledgement does to the lease in force on its (partition, group).
type LeaseAfterAck uint8

// Lease rules. The ack routes release a lease once the cursor reaches the end of the leased
// batch; a stream cycle releases it at once (the rest of the batch is redelivered to the next
// pop) or keeps it until it expires (a gate's partial acknowledgement).
const (
	LeaseUntilBatchEnd LeaseAfterAck = iota
	LeaseRelease
	LeaseKeep
)

// AckResult is the outcome of one AckItem.
type AckResult struct {
	Success       bool
	Error         string    // "" when none
	Queue         QueueName // zero when the partition is not found (in scope)
	PartitionName string
	LeaseReleased bool
	DLQ           bool
}

// Ack applies items in one transaction.
func (s *Store) Ack(ctx context.Context, items []AckItem) ([]AckResult, error) {
	var out []AckResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = ackInTx(ctx, tx, items, s.leased.lookUp(items), false)
		return err
	})
	if err != nil {
		return nil, err
	}
	for i, r := range out {
		if r.LeaseReleased {
			s.leased.forget(items[i].LeaseID, items[i].PartitionID)
		}
	}
	return out, nil
}

type consumerKey struct {
	partition uuid.UUID
	group     string
}

// consumerState is one partition_consumers row while acks are applied to it.
type consumerState struct {
	exists      bool
	cursor      int64
	leaseID     string
	leaseActive bool
	leaseEnd    int64
	retries     int
	consumed    int64
	batches     int64
	// ceiling caps the cursor after a failed or retried message in this call, so a later
	// "completed" ack cannot carry the cursor past a message that must be redelivered.
	ceiling int64
	touched bool
}

type dlqRow struct {
	partition uuid.UUID
	seq       int64
	group     string
	reason    string
	retries   int
}

// ackedMessagesSQL finds the message of each acknowledgement ($2 in partition $1, for tenant
// $3), in the order of the items. A partition outside the item's scope joins nothing: no
// message, no names, the answer of a partition id that does not exist. Each distinct partition
// is looked up once (an ack batch names a few partitions for hundreds of messages), then each
// message is a probe of message_transactions' key (see duplicateProbeSQL): as a
// plain join, PostgreSQL hashed every partition with its queue for each ack, 10 ms an ack at
// 10k partitions. An item whose seq the broker already knows ($4, 0 when not; see
// leasedMessages) skips the probe: its condition is a one-time filter of the subquery.
var ackedMessagesSQL = `WITH v AS (SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::int8[]) WITH ORDINALITY AS v(pid, tx, scope, known, ord)),
	parts AS (SELECT k.pid, k.scope, p.id, p.name, p.queue, p.retry_limit
		FROM (SELECT DISTINCT pid, scope FROM v) k
		CROSS JOIN LATERAL (SELECT p.id, p.name, q.name AS queue, q.retry_limit
			FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
			WHERE p.id = k.pid AND ` + inScope("q.name", "k.scope") + ` LIMIT 1) p)
	SELECT v.ord, m.seq, COALESCE(p.name, ''), COALESCE(p.queue, ''), COALESCE(p.retry_limit, 0)
	FROM v
	LEFT JOIN parts p ON p.pid = v.pid AND p.scope = v.scope
	LEFT JOIN LATERAL (SELECT v.known AS seq WHERE v.known > 0 AND p.id IS NOT NULL
		UNION ALL
		SELECT m.seq FROM queen.message_transactions m WHERE v.known = 0 AND m.partition_id = p.id AND m.transaction_id = v.tx
		LIMIT 1) m ON true
	ORDER BY v.ord`

// ackInTx locks the (partition, group) rows in key order, resolves each transactionId to its
// sequence number (known[i] when not 0; known may be nil) and applies the acks of each row in
// sequence order. With failedToDLQ (the transaction route) a failed ack dead-letters at once
// instead of spending the retry budget.
func ackInTx(ctx context.Context, tx pgx.Tx, items []AckItem, known []int64, failedToDLQ bool) ([]AckResult, error) {
	if known == nil {
		known = make([]int64, len(items)) // a NULL array would unnest to NULLs: no probe at all
	}
	pids := make([][16]byte, len(items)) // [16]byte: see the push columns
	groups := make([]string, len(items))
	txIDs := make([]string, len(items))
	scopes := make([]string, len(items))
	for i, it := range items {
		pids[i], groups[i], txIDs[i], scopes[i] = it.PartitionID, it.Group, it.TransactionID, it.Scope.Tenant
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT pc.partition_id, pc.consumer_group, pc.cursor_seq, COALESCE(pc.lease_id::text, ''),
			COALESCE(pc.lease_expires_at > now(), false), pc.lease_end_seq, pc.batch_retry_count
		FROM queen.partition_consumers pc
		WHERE (pc.partition_id, pc.consumer_group) IN (SELECT * FROM unnest($1::uuid[], $2::text[]))
		ORDER BY pc.partition_id, pc.consumer_group FOR UPDATE`, pids, groups)
	// The lock above may take the row of an item outside its scope; it is never written.
	b.Queue(ackedMessagesSQL, pids, txIDs, scopes, known)
	br := tx.SendBatch(ctx, b)
	state := map[consumerKey]*consumerState{}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, fmt.Errorf("cannot lock consumer cursors: %w", err)
	}
	for rows.Next() {
		var k consumerKey
		st := &consumerState{exists: true}
		if err := rows.Scan(&k.partition, &k.group, &st.cursor, &st.leaseID, &st.leaseActive, &st.leaseEnd, &st.retries); err != nil {
			rows.Close()
			br.Close()
			return nil, fmt.Errorf("cannot lock consumer cursors: %w", err)
		}
		state[k] = st
	}
	rows.Close()
	seqs := make([]pgtype.Int8, len(items))
	out := make([]AckResult, len(items))
	retryLimit := make([]int, len(items))
	rows, err = br.Query()
	if err != nil {
		br.Close()
		return nil, fmt.Errorf("cannot resolve acknowledged messages: %w", err)
	}
	for rows.Next() {
		var ord int
		var seq pgtype.Int8
		var r AckResult
		var limit int
		if err := rows.Scan(&ord, &seq, &r.PartitionName, &r.Queue, &limit); err != nil {
			rows.Close()
			br.Close()
			return nil, fmt.Errorf("cannot resolve acknowledged messages: %w", err)
		}
		seqs[ord-1], out[ord-1], retryLimit[ord-1] = seq, r, limit
	}
	rows.Close()
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("cannot resolve acknowledged messages: %w", err)
	}

	// Apply each row's acks in sequence order; results stay in request order.
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		ia, ib := items[order[a]], items[order[b]]
		if ia.PartitionID != ib.PartitionID {
			return ia.PartitionID.String() < ib.PartitionID.String()
		}
		if ia.Group != ib.Group {
			return ia.Group < ib.Group
		}
		return seqs[order[a]].Int64 < seqs[order[b]].Int64
	})
	var dlq []dlqRow
	for _, i := range order {
		it := items[i]
		r := &out[i]
		if !seqs[i].Valid {
			r.Error = ErrMessageNotFound
			continue
		}
		seq := seqs[i].Int64
		k := consumerKey{it.PartitionID, it.Group}
		st := state[k]
		if st == nil {
			st = &consumerState{}
			state[k] = st
		}
		if st.ceiling == 0 {
			st.ceiling = 1<<63 - 1
		}
		if !st.admits(it) {
			r.Error = ErrInvalidLease
			continue
		}
		st.touched = true
		r.Success = true
		switch it.Status {
		case AckCompleted:
			r.LeaseReleased = st.advance(seq, it.Lease)
		case AckFailed, AckDLQ:
			if it.Status == AckFailed && !failedToDLQ && st.retries < retryLimit[i] {
				r.LeaseReleased = st.release()
				st.retries++
				st.ceiling = min(st.ceiling, seq-1)
				continue
			}
			reason := it.Error
			if reason == "" {
				reason = "Retries exhausted"
			}
			dlq = append(dlq, dlqRow{it.PartitionID, seq, it.Group, reason, st.retries})
			r.DLQ = true
			r.LeaseReleased = st.advance(seq, it.Lease)
		case AckRetry:
			r.LeaseReleased = st.release()
			st.ceiling = min(st.ceiling, seq-1)
		}
	}

	b = &pgx.Batch{}
	var upd, ins rowUpdates
	for k, st := range state {
		if !st.touched {
			continue
		}
		switch {
		case st.exists:
			upd.add(k, st)
		case st.cursor > 0:
			// Creating a row at cursor 0 would reset where a named group starts reading.
			ins.add(k, st)
		}
	}
	if len(upd.pid) > 0 {
		// Rows locked above: their new state is exact.
		b.Queue(`UPDATE queen.partition_consumers pc SET
				cursor_seq = v.cursor,
				total_messages_consumed = pc.total_messages_consumed + v.consumed,
				total_batches_consumed = pc.total_batches_consumed + v.batches,
				batch_retry_count = v.retries,
				last_consumed_at = CASE WHEN v.consumed > 0 THEN now() ELSE pc.last_consumed_at END,
				lease_id = CASE WHEN v.lease_active THEN pc.lease_id END,
				lease_expires_at = CASE WHEN v.lease_active THEN pc.lease_expires_at END,
				lease_end_seq = CASE WHEN v.lease_active THEN pc.lease_end_seq ELSE 0 END
			FROM unnest($1::uuid[], $2::text[], $3::int8[], $4::int8[], $5::int8[], $6::bool[], $7::int4[])
				AS v(pid, g, cursor, consumed, batches, lease_active, retries)
			WHERE pc.partition_id = v.pid AND pc.consumer_group = v.g`, upd.args()...)
	}
	if len(ins.pid) > 0 {
		// An ack without a pop creates the row; GREATEST keeps a cursor that a concurrent
		// creator already moved further.
		b.Queue(`INSERT INTO queen.partition_consumers AS pc
				(partition_id, consumer_group, cursor_seq, total_messages_consumed, batch_retry_count, last_consumed_at)
			SELECT v.pid, v.g, v.cursor, v.consumed, v.retries, now()
			FROM unnest($1::uuid[], $2::text[], $3::int8[], $4::int8[], $5::int8[], $6::bool[], $7::int4[])
				AS v(pid, g, cursor, consumed, batches, lease_active, retries)
			JOIN queen.partitions p ON p.id = v.pid
			ORDER BY v.pid, v.g
			ON CONFLICT (partition_id, consumer_group) DO UPDATE SET
				cursor_seq = GREATEST(pc.cursor_seq, EXCLUDED.cursor_seq),
				total_messages_consumed = pc.total_messages_consumed + EXCLUDED.total_messages_consumed`, ins.args()...)
	}
	if len(dlq) > 0 {
		dPid := make([][16]byte, len(dlq))
		dSeq := make([]int64, len(dlq))
		dGroup := make([]string, len(dlq))
		dReason := make([]string, len(dlq))
		dRetries := make([]int32, len(dlq))
		for i, d := range dlq {
			dPid[i], dSeq[i], dGroup[i], dReason[i], dRetries[i] = d.partition, d.seq, d.group, d.reason, int32(d.retries)
		}
		b.Queue(`INSERT INTO queen.dead_letter_queue (partition_id, message_seq, consumer_group, error_message, retry_count)
			SELECT * FROM unnest($1::uuid[], $2::int8[], $3::text[], $4::text[], $5::int4[])`, dPid, dSeq, dGroup, dReason, dRetries)
	}
	if b.Len() == 0 {
		return out, nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("cannot store acknowledgements: %w", err)
	}
	return out, nil
}

// rowUpdates holds new partition_consumers states as columns for one unnest statement.
type rowUpdates struct {
	pid                       [][16]byte
	group                     []string
	cursor, consumed, batches []int64
	leaseActive               []bool
	retries                   []int32
}

func (u *rowUpdates) add(k consumerKey, st *consumerState) {
	u.pid = append(u.pid, k.partition)
	u.group = append(u.group, k.group)
	u.cursor = append(u.cursor, st.cursor)
	u.consumed = append(u.consumed, st.consumed)
	u.batches = append(u.batches, st.batches)
	u.leaseActive = append(u.leaseActive, st.leaseActive)
	u.retries = append(u.retries, int32(st.retries))
}

func (u *rowUpdates) args() []any {
	return []any{u.pid, u.group, u.cursor, u.consumed, u.batches, u.leaseActive, u.retries}
}

// advance moves the cursor to seq (never backwards, never past the ceiling) and releases the
// lease as the rule says: by default once the cursor reaches the end of the leased batch. It
// reports a release.
func (st *consumerState) advance(seq int64, rule LeaseAfterAck) bool {
	next := min(seq, st.ceiling)
	if next > st.cursor {
		st.consumed += next - st.cursor
		st.cursor = next
	}
	release := rule == LeaseRelease || (rule == LeaseUntilBatchEnd && st.cursor >= st.leaseEnd)
	if st.leaseActive && release {
		st.leaseActive = false
		st.retries = 0
		st.batches++
		return true
	}
	return false
}

// admits says whether an acknowledgement may move the cursor. It must name the lease in force,
// or name none and hold it (HeldLeases), or name none when none is in force: otherwise an ack
// lacking a leaseId would move the cursor under another consumer's lease.
func (st *consumerState) admits(it AckItem) bool {
	inForce := st.leaseInForce()
	if it.LeaseID != "" || inForce == "" {
		return it.LeaseID == inForce
	}
	return slices.Contains(it.HeldLeases, inForce)
}

// leaseInForce is the id of the lease in force, "" when there is none.
func (st *consumerState) leaseInForce() string {
	if !st.leaseActive {
		return ""
	}
	return st.leaseID
}

func (st *consumerState) release() bool {
	if !st.leaseActive {
		return false
	}
	st.leaseActive = false
	return true
}

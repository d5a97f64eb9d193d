package persistence

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
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

// Ack applies items. A batch that only completes messages of leases this broker granted is one
// statement (ackLeased); any other, or what ackLeased could not apply, is one transaction of two
// round trips: BEGIN travels with the lock and lookups, COMMIT with the writes.
func (s *Store) Ack(ctx context.Context, items []AckItem) ([]AckResult, error) {
	hits := s.leased.lookUp(items)
	out, rest, err := s.ackLeased(ctx, items, hits)
	if err != nil {
		return nil, err
	}
	if len(rest) > 0 {
		sub := make([]AckItem, len(rest))
		var known []int64
		for j, i := range rest {
			sub[j] = items[i]
			if hits != nil && hits[i].seq != 0 {
				if known == nil {
					known = make([]int64, len(rest))
				}
				known[j] = hits[i].seq
			}
		}
		var res []AckResult
		err := s.pipelinedTx(ctx, "ack", func(conn *pgx.Conn) error {
			var err error
			res, err = ackInTx(ctx, conn, sub, known, ackOptions{explicit: true})
			return err
		})
		if err != nil {
			return nil, err
		}
		for j, i := range rest {
			out[i] = res[j]
		}
	}
	for i, r := range out {
		if r.LeaseReleased {
			s.leased.forget(items[i].LeaseID, items[i].PartitionID)
		}
	}
	return out, nil
}

// ackLeasedSQL completes, for each (partition $1, group $2) whose lease $3 is in force, the
// messages up to seq $4: the cursor moves there and, when that is the end of the leased batch,
// the lease is released, as ackInTx would. A row whose lease is not in force, or whose cursor
// already reached the end, is left alone and not returned. The rows come sorted by key, the
// order in which the other writers of consumer rows lock them.
const ackLeasedSQL = `UPDATE queen.partition_consumers pc SET
		cursor_seq = GREATEST(pc.cursor_seq, v.seq),
		total_messages_consumed = pc.total_messages_consumed + GREATEST(v.seq - pc.cursor_seq, 0),
		last_consumed_at = CASE WHEN v.seq > pc.cursor_seq THEN now() ELSE pc.last_consumed_at END,
		total_batches_consumed = pc.total_batches_consumed + (v.seq >= pc.lease_end_seq)::int,
		batch_retry_count = CASE WHEN v.seq >= pc.lease_end_seq THEN 0 ELSE pc.batch_retry_count END,
		lease_id = CASE WHEN v.seq >= pc.lease_end_seq THEN NULL ELSE pc.lease_id END,
		lease_expires_at = CASE WHEN v.seq >= pc.lease_end_seq THEN NULL ELSE pc.lease_expires_at END,
		lease_end_seq = CASE WHEN v.seq >= pc.lease_end_seq THEN 0 ELSE pc.lease_end_seq END
	FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::int8[]) AS v(pid, g, lease, seq)
	WHERE pc.partition_id = v.pid AND pc.consumer_group = v.g
	  AND pc.lease_id = v.lease AND pc.lease_expires_at > now() AND pc.cursor_seq < pc.lease_end_seq
	RETURNING pc.partition_id, pc.consumer_group, pc.lease_id IS NULL`

// leasedRow is one consumer row of an ack batch that ackLeased may apply.
type leasedRow struct {
	lease string
	id    [16]byte // lease, parsed: the binary form of the statement's uuid
	items []int    // item indexes
	seqs  []int64  // the items' seqs, sorted once all are in
}

// ackLeased applies, as one statement in its own implicit transaction, an ack batch that only
// completes messages this broker delivered under leases it granted (hits), each message once:
// what ackInTx does for such a batch is to move each consumer row's cursor to its highest seq
// and release the lease at the batch's end, and the cache already knows the seqs and the names
// the answer carries. It returns the answers it gave, and in rest the items it left to
// ackInTx: all of them when the batch is not of that kind, or the items of rows the statement
// left alone (a lease no longer in force). Those rows were not written, so ackInTx finds them
// as they were.
func (s *Store) ackLeased(ctx context.Context, items []AckItem, hits []leasedHit) (out []AckResult, rest []int, err error) {
	out = make([]AckResult, len(items))
	all := func() ([]AckResult, []int, error) {
		rest := make([]int, len(items))
		for i := range rest {
			rest[i] = i
		}
		return out, rest, nil
	}
	if hits == nil {
		return all()
	}
	rows := map[consumerKey]*leasedRow{}
	for i, it := range items {
		h := hits[i]
		if h.seq == 0 || it.Status != AckCompleted || it.Lease != LeaseUntilBatchEnd || !it.Scope.Owns(h.claim.queue) {
			return all()
		}
		k := consumerKey{it.PartitionID, it.Group}
		r := rows[k]
		if r == nil {
			id, err := uuid.Parse(it.LeaseID)
			if err != nil {
				return all()
			}
			r = &leasedRow{lease: it.LeaseID, id: id}
			rows[k] = r
		}
		// Two leases named on one row: ackInTx refuses one of them.
		if r.lease != it.LeaseID {
			return all()
		}
		r.items = append(r.items, i)
		r.seqs = append(r.seqs, h.seq)
	}
	// One message named twice: ackInTx refuses the second once the first released the lease.
	// Clients acknowledge in delivery order, so the seqs are usually sorted already.
	for _, r := range rows {
		if !slices.IsSorted(r.seqs) {
			slices.Sort(r.seqs)
		}
		for j := 1; j < len(r.seqs); j++ {
			if r.seqs[j] == r.seqs[j-1] {
				return all()
			}
		}
	}
	keys := make([]consumerKey, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b consumerKey) int {
		if c := bytes.Compare(a.partition[:], b.partition[:]); c != 0 {
			return c
		}
		return strings.Compare(a.group, b.group)
	})
	pids := make([][16]byte, len(keys))
	leases := make([][16]byte, len(keys))
	groups, maxes := make([]string, len(keys)), make([]int64, len(keys))
	for j, k := range keys {
		r := rows[k]
		pids[j], groups[j], leases[j], maxes[j] = k.partition, k.group, r.id, r.seqs[len(r.seqs)-1]
	}
	released := map[consumerKey]bool{}
	err = s.pipelinedTx(ctx, "ack", func(conn *pgx.Conn) error {
		clear(released)
		b := &pgx.Batch{}
		b.Queue(keyedPlans)
		b.Queue(ackLeasedSQL, pids, groups, leases, maxes)
		br := conn.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("cannot set up acknowledgements: %w", err)
		}
		rs, err := br.Query()
		if err != nil {
			return fmt.Errorf("cannot store acknowledgements: %w", err)
		}
		var k consumerKey
		var rel bool
		_, err = pgx.ForEachRow(rs, []any{&k.partition, &k.group, &rel}, func() error {
			released[k] = rel
			return nil
		})
		if err != nil {
			return fmt.Errorf("cannot store acknowledgements: %w", err)
		}
		return br.Close()
	})
	if err != nil {
		return nil, nil, err
	}
	for _, k := range keys {
		r := rows[k]
		rel, applied := released[k]
		if !applied {
			rest = append(rest, r.items...)
			continue
		}
		end := r.seqs[len(r.seqs)-1]
		for _, i := range r.items {
			c := hits[i].claim
			out[i] = AckResult{Success: true, Queue: c.queue, PartitionName: c.partition,
				LeaseReleased: rel && hits[i].seq == end}
		}
	}
	slices.Sort(rest)
	return out, rest, nil
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

// ackPartitionsSQL names each distinct partition of an ack batch ($1, for tenant $2): its name,
// its queue's and the queue's retry limit, by ordinal. A partition outside the scope answers no
// row, as one that does not exist. Each is a LATERAL probe: as a plain join, PostgreSQL hashed
// every partition with its queue for each ack, 10 ms an ack at 10k partitions.
var ackPartitionsSQL = `SELECT v.ord, p.name, p.queue, p.retry_limit
	FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS v(pid, scope, ord)
	CROSS JOIN LATERAL (SELECT p.name, q.name AS queue, q.retry_limit
		FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE p.id = v.pid AND ` + inScope("q.name", "v.scope") + ` LIMIT 1) p`

// ackedMessagesSQL finds the seq of each transactionId ($2 in partition $1), by ordinal: one
// probe of message_transactions' key per item (see duplicateProbeSQL). It runs only for the
// items whose seq the broker does not know (leasedMessages), and its answer counts only where
// ackPartitionsSQL found the partition in the caller's scope.
const ackedMessagesSQL = `SELECT v.ord, m.seq
	FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS v(pid, tx, ord)
	CROSS JOIN LATERAL (SELECT m.seq FROM queen.message_transactions m
		WHERE m.partition_id = v.pid AND m.transaction_id = v.tx LIMIT 1) m`

// ackPartition is a partition an ack batch names, with the caller's scope.
type ackPartition struct {
	id    uuid.UUID
	scope string
}

// ackOptions say how ackInTx runs.
type ackOptions struct {
	// failedToDLQ (the transaction route): a failed ack dead-letters at once instead of
	// spending the retry budget.
	failedToDLQ bool
	// explicit: tx is a bare connection; the first batch opens the transaction and the second
	// commits it.
	explicit bool
}

// ackInTx locks the (partition, group) rows in key order, resolves each transactionId to its
// sequence number (known[i] when not 0; known may be nil) and applies the acks of each row in
// sequence order. PostgreSQL sees each consumer row and partition once and only the items whose
// seq is not known: an ack batch of a lease this broker granted sends no per-message row at all.
func ackInTx(ctx context.Context, tx batchSender, items []AckItem, known []int64, o ackOptions) ([]AckResult, error) {
	var rowPids, partPids, probePids [][16]byte // [16]byte: see the push columns
	var rowGroups, partScopes, probeTxs []string
	var probed []int // item index of each probe
	rowSeen := map[consumerKey]bool{}
	partOf := make([]int, len(items)) // item index → index in partPids
	partSeen := map[ackPartition]int{}
	for i, it := range items {
		if k := (consumerKey{it.PartitionID, it.Group}); !rowSeen[k] {
			rowSeen[k] = true
			rowPids, rowGroups = append(rowPids, it.PartitionID), append(rowGroups, it.Group)
		}
		k := ackPartition{it.PartitionID, it.Scope.Tenant}
		n, ok := partSeen[k]
		if !ok {
			n = len(partPids)
			partSeen[k] = n
			partPids, partScopes = append(partPids, it.PartitionID), append(partScopes, it.Scope.Tenant)
		}
		partOf[i] = n
		if known == nil || known[i] == 0 {
			probed = append(probed, i)
			probePids, probeTxs = append(probePids, it.PartitionID), append(probeTxs, it.TransactionID)
		}
	}
	b := &pgx.Batch{}
	if o.explicit {
		b.Queue("BEGIN")
	}
	b.Queue(keyedPlans)
	// The lock may take the row of an item outside its scope; it is never written.
	b.Queue(ackLockSQL, rowPids, rowGroups)
	b.Queue(ackPartitionsSQL, partPids, partScopes)
	if len(probed) > 0 {
		b.Queue(ackedMessagesSQL, probePids, probeTxs)
	}
	setup := 1 // keyedPlans, and BEGIN before it
	if o.explicit {
		setup = 2
	}
	br := tx.SendBatch(ctx, b)
	for range setup {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, fmt.Errorf("cannot set up acknowledgements: %w", err)
		}
	}
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
	type partInfo struct {
		found      bool
		name       string
		queue      QueueName
		retryLimit int
	}
	parts := make([]partInfo, len(partPids))
	rows, err = br.Query()
	if err != nil {
		br.Close()
		return nil, fmt.Errorf("cannot find acknowledged partitions: %w", err)
	}
	for rows.Next() {
		var ord int
		var p partInfo
		if err := rows.Scan(&ord, &p.name, &p.queue, &p.retryLimit); err != nil {
			rows.Close()
			br.Close()
			return nil, fmt.Errorf("cannot find acknowledged partitions: %w", err)
		}
		p.found = true
		parts[ord-1] = p
	}
	rows.Close()
	seqs := make([]int64, len(items)) // 0: not found
	if known != nil {
		copy(seqs, known)
	}
	if len(probed) > 0 {
		rows, err = br.Query()
		if err != nil {
			br.Close()
			return nil, fmt.Errorf("cannot resolve acknowledged messages: %w", err)
		}
		for rows.Next() {
			var ord int
			var seq int64
			if err := rows.Scan(&ord, &seq); err != nil {
				rows.Close()
				br.Close()
				return nil, fmt.Errorf("cannot resolve acknowledged messages: %w", err)
			}
			seqs[probed[ord-1]] = seq
		}
		rows.Close()
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("cannot resolve acknowledged messages: %w", err)
	}
	out := make([]AckResult, len(items))
	retryLimit := make([]int, len(items))
	for i := range items {
		p := parts[partOf[i]]
		if !p.found {
			seqs[i] = 0 // outside the caller's scope, or no such partition
			continue
		}
		out[i].PartitionName, out[i].Queue, retryLimit[i] = p.name, p.queue, p.retryLimit
	}

	// Apply each row's acks in sequence order; results stay in request order.
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		ia, ib := items[order[a]], items[order[b]]
		if c := bytes.Compare(ia.PartitionID[:], ib.PartitionID[:]); c != 0 {
			return c < 0 // the order of their text, without making it
		}
		if ia.Group != ib.Group {
			return ia.Group < ib.Group
		}
		return seqs[order[a]] < seqs[order[b]]
	})
	var dlq []dlqRow
	for _, i := range order {
		it := items[i]
		r := &out[i]
		seq := seqs[i]
		if seq == 0 {
			r.Error = ErrMessageNotFound
			continue
		}
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
			if it.Status == AckFailed && !o.failedToDLQ && st.retries < retryLimit[i] {
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
		b.Queue(ackUpdateSQL, upd.args()...)
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
	if o.explicit {
		b.Queue("COMMIT")
	}
	if b.Len() == 0 {
		return out, nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("cannot store acknowledgements: %w", err)
	}
	return out, nil
}

// ackLockSQL locks the consumer rows an ack batch writes, in key order so that two batches
// cannot deadlock.
const ackLockSQL = `SELECT pc.partition_id, pc.consumer_group, pc.cursor_seq, COALESCE(pc.lease_id::text, ''),
		COALESCE(pc.lease_expires_at > now(), false), pc.lease_end_seq, pc.batch_retry_count
	FROM queen.partition_consumers pc
	WHERE (pc.partition_id, pc.consumer_group) IN (SELECT * FROM unnest($1::uuid[], $2::text[]))
	ORDER BY pc.partition_id, pc.consumer_group FOR UPDATE`

// ackUpdateSQL writes the new state of consumer rows that ackLockSQL locked.
const ackUpdateSQL = `UPDATE queen.partition_consumers pc SET
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
	WHERE pc.partition_id = v.pid AND pc.consumer_group = v.g`

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

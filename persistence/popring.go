package persistence

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// RingPosition is where a consumer group's wildcard pops of a queue stand in the round of the
// queue's partitions, taken in name order: the next pop searches from the partition after
// Partition, round to the first and back to Partition. Every partition with data is thus
// claimed once per round, whatever the number of partitions, and a pop reads only the
// partitions between the position and what it claims instead of all of them.
//
// A broker keeps one position per queue and group in memory (the queue actor) and hands each
// pop the one the previous pop returned; the zero value starts at the first partition.
type RingPosition struct {
	// Queue is the queue's id, uuid.Nil until a pop has looked it up. The search needs it as
	// a constant: given only the queue's name, PostgreSQL guesses the queue's size from the
	// average over all queues and sorts every partition of a large queue instead of walking
	// its index.
	Queue     uuid.UUID
	Partition string // the last partition claimed
	Claimed   bool   // Partition is set
}

// Ring search bounds. A step reads at most a chunk of partitions; the first chunk is small
// (firstChunk), so a queue where most partitions have data costs a handful of rows per pop,
// and each further chunk of the same pop is larger, so a pop that has to go round a sparse
// queue needs few round trips.
const (
	firstRingChunk = 32
	maxRingChunk   = 4096
)

// ringStepSQL reads the next chunk of the ring after the walk's position, in ring order (lap 1:
// the names after the pop's starting point; lap 2: from the first name up to it), keeps the
// partitions with data after the group's cursor, unleased and out of their window buffer, and
// takes the advisory lock of the first of them that no other pop is claiming, up to $9. The
// lock is tried only on those rows, in ring order, after the sort: a lock taken further would
// make concurrent pops skip partitions this pop does not claim.
//
// The candidates come first (id not NULL; n is last_seq, waiting the messages after the group's
// cursor); then one row (id NULL) with the queue's settings, the last partition of the chunk
// and, in n, how many partitions the chunk read. No such row means that no queue has this id
// and name. It runs on a generic plan (keyedPlans): the partitions come from the
// (queue_id, name) index after the position, and each one's cursor from a LATERAL probe of
// its (partition, group) key. The bounds are written as index conditions (a name after the
// position or the empty string, not "position IS NULL OR name > position"), so that a plan
// made while the queue had a handful of partitions still walks the index from the position
// instead of reading and sorting them all (TestPopSearchReadsAChunk).
const ringStepSQL = `
WITH q AS MATERIALIZED (
	SELECT lease_time, delayed_processing, window_buffer FROM queen.queues WHERE id = $1 AND name = $2),
ring AS MATERIALIZED (
	SELECT * FROM (
		(SELECT p.id, p.name, p.last_seq, p.last_message_at, 1 AS lap FROM queen.partitions p
		WHERE $3 AND p.queue_id = $1 AND p.name > COALESCE($4::text, '')
		ORDER BY p.name LIMIT $7)
		UNION ALL
		(SELECT p.id, p.name, p.last_seq, p.last_message_at, 2 FROM queen.partitions p
		WHERE $6::text IS NOT NULL AND p.queue_id = $1 AND p.name > COALESCE($5::text, '') AND p.name <= $6
		ORDER BY p.name LIMIT $7)) r
	ORDER BY lap, name LIMIT $7),
cand AS MATERIALIZED (
	SELECT r.id, r.name, r.lap, r.last_seq, pc.partition_id IS NOT NULL AS has_row, r.last_seq - COALESCE(pc.cursor_seq, 0) AS waiting
	FROM ring r CROSS JOIN q
	LEFT JOIN LATERAL (SELECT pc.partition_id, pc.cursor_seq, pc.lease_expires_at FROM queen.partition_consumers pc
		WHERE pc.partition_id = r.id AND pc.consumer_group = $8 LIMIT 1) pc ON true
	WHERE r.last_seq > COALESCE(pc.cursor_seq, 0)
	  AND (pc.lease_expires_at IS NULL OR pc.lease_expires_at <= now())
	  AND (q.window_buffer = 0 OR r.last_message_at <= now() - make_interval(secs => q.window_buffer))
	ORDER BY r.lap, r.name)
(SELECT id, name, lap, last_seq AS n, has_row, waiting, NULL::int AS lease_time, NULL::int AS delay FROM cand
	WHERE pg_try_advisory_xact_lock(hashtextextended(id::text || '/' || $8, 0)) LIMIT $9)
UNION ALL
SELECT NULL, e.name, e.lap, (SELECT count(*) FROM ring), NULL, NULL, q.lease_time, q.delayed_processing
FROM q LEFT JOIN LATERAL (SELECT name, lap FROM ring ORDER BY lap DESC, name DESC LIMIT 1) e ON true`

// ringWalk is one pop's way round the ring: lap 1 from after its starting point to the last
// name, then lap 2 from the first name up to the starting point. from is where the next step
// starts within the current lap (exclusive; nil: the lap's beginning).
type ringWalk struct {
	start *string // nil: the walk is one lap over every partition
	lap   int
	from  *string
}

func newRingWalk(pos RingPosition) *ringWalk {
	w := &ringWalk{lap: 1}
	if pos.Claimed {
		w.start, w.from = &pos.Partition, &pos.Partition
	}
	return w
}

// ringMark is a partition's place in a walk.
type ringMark struct {
	lap  int
	name string
}

// moveTo records that the walk has read up to m.
func (w *ringWalk) moveTo(m ringMark) {
	w.lap, w.from = m.lap, &m.name
}

// ringStepArgs are ringStepSQL's arguments for the walk's next chunk of queue (its stored
// name and id), for group, locking at most want partitions.
func ringStepArgs(id uuid.UUID, queue, group string, w *ringWalk, chunk, want int) []any {
	var lap1From, lap2From *string
	if w.lap == 1 {
		lap1From = w.from
	} else {
		lap2From = w.from
	}
	return []any{[16]byte(id), queue, w.lap == 1, lap1From, lap2From, w.start, chunk, group, want}
}

// ringStep is what one step of the walk found.
type ringStep struct {
	cands      []popCandidate // locked for this pop, in ring order
	lastCand   ringMark       // the last of cands
	queueFound bool
	read       int      // partitions the chunk read
	end        ringMark // the chunk's last partition, when read > 0
}

func (p *popTx) ringStep(ctx context.Context, id uuid.UUID, group string, w *ringWalk, chunk, want int) (ringStep, error) {
	var st ringStep
	rows, err := p.query(ctx, ringStepSQL, ringStepArgs(id, p.queue, group, w, chunk, want)...)
	if err != nil {
		return st, err
	}
	var leaseTime, delay int
	for rows.Next() {
		var (
			c       popCandidate
			cid     *uuid.UUID
			name    *string
			lap     *int
			n       int64
			hasRow  *bool
			waiting *int64
			lt, dly *int
		)
		if err := rows.Scan(&cid, &name, &lap, &n, &hasRow, &waiting, &lt, &dly); err != nil {
			rows.Close()
			return st, err
		}
		if cid == nil { // the chunk's summary
			st.queueFound, st.read, leaseTime, delay = true, int(n), *lt, *dly
			if name != nil {
				st.end = ringMark{*lap, *name}
			}
			continue
		}
		c.id, c.name, c.hasRow, c.lastSeq, c.waiting = *cid, *name, *hasRow, n, *waiting
		st.cands = append(st.cands, c)
		st.lastCand = ringMark{*lap, *name}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, err
	}
	for i := range st.cands {
		st.cands[i].leaseTime, st.cands[i].delay = leaseTime, delay
	}
	return st, nil
}

// errQueueMoved says that the queue id of a ring position no longer names the queue (it was
// deleted, and maybe created again): the pop looks the queue up again.
var errQueueMoved = errors.New("the queue of the ring position is gone")

// popAny claims up to r.Partitions partitions with data, going round the ring from r.Resume,
// and reads up to r.Batch messages from them. It tries at most 64+4×Partitions partitions: a
// claim can come back empty (delayed processing, a subscription that starts after the
// partition's messages) or lose to a pop that committed its lease after this search read the
// partition, and the search then goes on after it.
func (p *popTx) popAny(ctx context.Context, r PopRequest, res *PopResult) error {
	p.setup = keyedPlans
	err := p.searchRing(ctx, r, r.Resume, res)
	if errors.Is(err, errQueueMoved) {
		err = p.searchRing(ctx, r, RingPosition{}, res)
	}
	if err != nil {
		return err
	}
	if len(res.Partitions) == 0 {
		res.Outcome = PopNoPartition
	}
	return nil
}

func (p *popTx) searchRing(ctx context.Context, r PopRequest, pos RingPosition, res *PopResult) error {
	if pos.Queue == uuid.Nil {
		rows, err := p.query(ctx, `SELECT id FROM queen.queues WHERE name = $1`, p.queue)
		if err != nil {
			return fmt.Errorf("cannot find queue %s: %w", r.Queue, err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return fmt.Errorf("cannot find queue %s: %w", r.Queue, err)
		}
		if len(ids) == 0 {
			return nil
		}
		pos = RingPosition{Queue: ids[0]}
	}
	res.Resume = pos
	// searched tells r.Searched that the walk has gone as far as name: what it claims up to
	// there is locked for this pop, and what it passed over had nothing to take.
	searched := func(name string) {
		if r.Searched != nil {
			r.Searched(RingPosition{Queue: pos.Queue, Partition: name, Claimed: true})
		}
	}
	w := newRingWalk(pos)
	tries := 64 + 4*r.Partitions
	for chunk := firstChunk(r.Partitions); ; {
		want := min(r.Partitions-len(res.Partitions), tries)
		if want <= 0 {
			return nil
		}
		st, err := p.ringStep(ctx, pos.Queue, r.Group, w, chunk, want)
		if err != nil {
			return fmt.Errorf("cannot search the partitions of %s: %w", r.Queue, err)
		}
		if !st.queueFound {
			if pos != r.Resume || len(res.Partitions) > 0 {
				return nil // looked up just now, or deleted since the first step: no queue
			}
			return errQueueMoved
		}
		if len(st.cands) == 0 && st.read > 0 {
			searched(st.end.name)
		}
		for rest := st.cands; len(rest) > 0; {
			limits := claimLimits(rest, r.Batch-len(res.Messages))
			if len(limits) < len(rest) || len(st.cands) == want {
				searched(rest[len(limits)-1].name)
			} else {
				searched(st.end.name) // every candidate is claimed, and past them the chunk had none
			}
			n := len(limits)
			if err := p.claimSome(ctx, r, rest[:n], limits, res); err != nil {
				return err
			}
			rest, tries = rest[n:], tries-n
			if k := len(res.Partitions); k > 0 {
				res.Resume = RingPosition{Queue: pos.Queue, Partition: res.Partitions[k-1].Name, Claimed: true}
			}
			if len(res.Messages) >= r.Batch || len(res.Partitions) >= r.Partitions {
				return nil
			}
		}
		switch {
		case tries <= 0:
			return nil
		case len(st.cands) == want:
			// The lock limit stopped the step: what follows the last candidate is unread. A
			// claim failed, mostly because a pop that committed while this step ran had
			// consumed the partition this step's snapshot still showed with data. Such pops
			// work the same stretch of the ring, so the next step is small again: a step's
			// snapshot ages for as long as it reads, and a large one would find more of what
			// they have just taken.
			w.moveTo(st.lastCand)
			chunk = firstChunk(r.Partitions - len(res.Partitions))
		case st.read < chunk:
			return nil // round the whole ring
		default:
			w.moveTo(st.end)
			chunk = min(4*chunk, maxRingChunk)
		}
	}
}

// firstChunk is the first step's chunk for a pop that wants want partitions: eight for each,
// up to firstRingChunk. A step reads a cursor for every partition of its chunk before the lock
// limit stops it, and most pops want one partition: at 200 partitions with data, a chunk of
// 32 was 159 buffer reads and 311 µs for the one partition claimed (docs/performance.md,
// seventh round).
func firstChunk(want int) int { return min(firstRingChunk, 8*want) }

// claimLimits plans the claims of candidates in ring order: the first of them whose messages
// waiting, as the search counted them, fill the budget (all of them if they do not), each
// with the most it may read. Each claim but the last reads at most what the search counted in
// its partition and what the budget leaves after the claims before it; the last reads what the
// budget leaves. The pop thus never reads more than its budget, and a partition that received
// messages since the search is read past the count when it is the last. A claim that comes back
// short (a lost claim, a delayed message) leaves budget for the caller's next round.
func claimLimits(cands []popCandidate, budget int) []int {
	var limits []int
	for left := budget; len(limits) < len(cands) && left > 0; {
		c := cands[len(limits)]
		limit := left
		if waiting := max(1, c.waiting); waiting < int64(left) && len(limits)+1 < len(cands) {
			limit = int(waiting)
		}
		limits = append(limits, limit)
		left -= limit
	}
	return limits
}

// claimSome claims cands, each reading at most its limit, in one round trip: one candidate by
// its claimStatement, several by claimManySQL.
func (p *popTx) claimSome(ctx context.Context, r PopRequest, cands []popCandidate, limits []int, res *PopResult) error {
	if len(cands) == 1 {
		_, err := p.claimAndRead(ctx, r, cands[0], limits[0], true, res)
		return err
	}
	n := len(cands)
	ids, groups, seeds, hasRow, lims := make([][16]byte, n), make([]string, n), make([]int64, n), make([]bool, n), make([]int32, n)
	for i, c := range cands {
		_, seed, err := p.claimSeed(ctx, r, c, true)
		if err != nil {
			return err
		}
		ids[i], groups[i], seeds[i], hasRow[i], lims[i] = [16]byte(c.id), r.Group, seed, c.hasRow, int32(limits[i])
	}
	rows, err := p.claimRows(ctx, !r.AutoAck, claimManySQL, ids, groups, seeds, hasRow, lims, [16]byte(r.LeaseID), leaseSeconds(cands[0]), cands[0].delay)
	if err != nil {
		return fmt.Errorf("cannot lease the partitions of %s: %w", r.Queue, err)
	}
	reads := make([]*claimRead, n)
	for i, c := range cands {
		reads[i] = p.newClaimRead(r, c, true, res)
	}
	last := 0
	for rows.Next() {
		if last == 0 {
			if err := binaryColumns(rows.FieldDescriptions()); err != nil {
				rows.Close()
				return fmt.Errorf("cannot read the partitions of %s: %w", r.Queue, err)
			}
		}
		v := rows.RawValues()
		ord := 0
		if len(v[0]) == 8 {
			ord = int(binary.BigEndian.Uint64(v[0]))
		}
		// The rows of each claim come together, in candidate order: the messages of each
		// partition are appended after the previous partition's.
		if ord < max(last, 1) || ord > n {
			rows.Close()
			return fmt.Errorf("cannot read the partitions of %s: a row of claim %d after claim %d", r.Queue, ord, last)
		}
		last = ord
		if err := reads[ord-1].row(v[1:]); err != nil {
			rows.Close()
			return err
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("cannot lease the partitions of %s: %w", r.Queue, err)
	}
	for _, cr := range reads {
		cr.finish()
	}
	return nil
}

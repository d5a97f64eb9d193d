package persistence

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// PopRequest asks for up to Batch messages of one queue for one consumer group.
type PopRequest struct {
	Queue      QueueName
	Partition  string // "" lets the broker pick partitions
	Group      string
	Batch      int
	Partitions int // how many partitions a wildcard pop may claim (at least 1)
	AutoAck    bool
	LeaseID    uuid.UUID
	// SubscribeFrom is where a named group that has never read a partition starts: nil reads
	// from the beginning; a time skips every message created at or before it. The first pop
	// that sets it records it for the group, and later pops follow the recorded value.
	SubscribeFrom *time.Time
	SubscribeNow  bool // start at "now" (subscriptionMode=new or subscriptionFrom=now)
	// Resume is where a wildcard pop starts its search: the Resume of the group's previous
	// wildcard pop of the queue (see RingPosition).
	Resume RingPosition
	// Searched, when set, is told how far round the ring the pop's search has read, after
	// every step, while the pop still claims what it found: a pop of the group started now
	// can begin there instead of reading again the partitions this one has locked. It runs on
	// the pop's goroutine and must not block.
	Searched func(RingPosition)
}

// PopOutcome says why a pop delivered nothing; PopOK when it claimed partitions.
type PopOutcome string

// Pop outcomes other than success, as the clients read them from the body.
const (
	PopOK                 PopOutcome = ""
	PopNoPartition        PopOutcome = "no_available_partition"
	PopPartitionNotFound  PopOutcome = "partition_not_found"
	PopLeaseHeld          PopOutcome = "lease_held"
	PopWindowBufferActive PopOutcome = "window_buffer_active"
)

// Partition names one claimed partition.
type Partition struct {
	ID   uuid.UUID
	Name string
}

// Message is one delivered message.
type Message struct {
	Seq           int64
	ID            uuid.UUID
	TransactionID string
	TraceID       uuid.NullUUID
	Payload       json.RawMessage
	CreatedAt     time.Time
	ProducerSub   string // "" when none (see PushItem)
	Encrypted     bool
	Partition     Partition
}

// PopResult is what one pop claimed and read.
type PopResult struct {
	Outcome    PopOutcome
	Partitions []Partition // claimed partitions, in claim order
	Messages   []Message
	Resume     RingPosition // where the group's next wildcard pop of the queue starts
}

// Pop claims partitions for the group and reads their next messages, in one transaction of
// three round trips: BEGIN with the candidate lookup, the claim-and-read statements of the
// partitions the batch needs (pipelined), and the bookkeeping updates with COMMIT. A wildcard
// pop that leases, the common case, takes two: its claim sets the lease's end and commits (see
// claimRows), and bookkeeping follows only when what it read disagrees. A claim reads a window
// of sequence numbers; when the windows held only deleted messages, the cursors have moved
// past them and the pop runs again, a few times at most.
func (s *Store) Pop(ctx context.Context, r PopRequest) (PopResult, error) {
	var res PopResult
	queue := r.Queue.Stored()
	for attempt := 0; ; attempt++ {
		skipped := false
		err := s.pipelinedTx(ctx, "pop", func(conn *pgx.Conn) error {
			res = PopResult{}
			p := &popTx{conn: conn, queue: queue}
			var err error
			if r.Partition != "" {
				err = p.popPartition(ctx, r, &res)
			} else {
				err = p.popAny(ctx, r, &res)
			}
			if err != nil {
				return err
			}
			if b := p.bookkeeping(r.Group, r.LeaseID); b.Len() > 0 {
				if err := conn.SendBatch(ctx, b).Close(); err != nil {
					return fmt.Errorf("cannot finish a pop of %s: %w", r.Queue, err)
				}
			}
			skipped = len(p.skipped.ids) > 0
			return nil
		})
		if err != nil {
			return res, err
		}
		if len(res.Messages) > 0 || !skipped || attempt >= maxSkippingPops {
			break
		}
		r.Resume = res.Resume
	}
	if !r.AutoAck {
		s.leased.remember(r.LeaseID, r.Queue, res.Messages)
	}
	return res, nil
}

// maxSkippingPops bounds the runs of one Pop over windows of deleted messages: past it, the pop
// answers empty and the next one goes on from where the cursors are.
const maxSkippingPops = 8

// popTx is one pop's transaction. The bookkeeping of its claims only touches rows the
// transaction has locked, so it waits for the commit's round trip: one statement per kind for
// all the claimed partitions.
type popTx struct {
	conn  *pgx.Conn
	queue string // the stored name of the popped queue
	begun bool
	setup string // a statement that BEGIN brings along, when not ""

	// What the claims read is copied into these: a block per claimed segment instead of an
	// allocation for each message's payload and transactionId.
	payloads, txIDs byteArena

	// Partition ids go to PostgreSQL as [16]byte: pgx encodes a uuid.UUID through its
	// driver.Valuer, as a string that fails the binary encoding before it is parsed again.
	released [][16]byte // claims that found nothing to deliver: the lease is given back
	leased   claimEnds  // claims that delivered under the lease
	consumed claimEnds  // autoAck claims: the cursor moves past what they delivered
	skipped  claimEnds  // claims that found only deleted messages: the cursor moves past them
}

// claimEnds are claimed partitions, each with the last sequence number it delivered and how
// many messages.
type claimEnds struct {
	ids   [][16]byte // see popTx.released
	ends  []int64
	sizes []int32
}

func (c *claimEnds) add(id uuid.UUID, end int64, n int) {
	c.ids, c.ends, c.sizes = append(c.ids, [16]byte(id)), append(c.ends, end), append(c.sizes, int32(n))
}

// bookkeeping is the batch that ends the pop: the updates of its claimed partitions for group,
// then COMMIT. When the last claim committed already (claimRows), it holds only the updates,
// which run as a transaction of their own, and nothing when the claims needed none. Each
// update applies under the pop's lease only: after that commit, a lease that ran out before
// its update may be another pop's already.
func (p *popTx) bookkeeping(group string, lease uuid.UUID) *pgx.Batch {
	b := &pgx.Batch{}
	if !p.begun {
		b.Queue(keyedPlans)
	}
	if len(p.released) > 0 {
		b.Queue(releaseLeasesSQL, p.released, group, [16]byte(lease))
	}
	p.leased.update(b, group, lease, leasedEnds)
	p.skipped.update(b, group, lease, `cursor_seq = GREATEST(pc.cursor_seq, v.seq), lease_id = NULL, lease_expires_at = NULL, lease_end_seq = 0`)
	p.consumed.update(b, group, lease, `cursor_seq = v.seq, lease_id = NULL, lease_expires_at = NULL, lease_end_seq = 0,
		batch_size = 0, batch_retry_count = 0, total_messages_consumed = pc.total_messages_consumed + v.n,
		total_batches_consumed = pc.total_batches_consumed + 1, last_consumed_at = now()`)
	switch {
	case p.begun:
		b.Queue("COMMIT")
	case b.Len() == 1:
		return &pgx.Batch{} // keyedPlans alone
	}
	return b
}

// releaseLeasesSQL gives back the leases ($3) of claims that found nothing to deliver.
const releaseLeasesSQL = `UPDATE queen.partition_consumers SET lease_id = NULL, lease_expires_at = NULL
	WHERE partition_id = ANY($1::uuid[]) AND consumer_group = $2 AND lease_id = $3`

// leasedEnds records where the lease of a claim ends and how many messages it holds.
const leasedEnds = `lease_end_seq = v.seq, batch_size = v.n`

// update queues the statement that applies set to the group's rows of the partitions under
// lease, where set reads each one's v.seq and v.n. A single partition, the common case at few
// partitions, is given as scalars: PostgreSQL plans that as an update by key, where a join with
// unnest costs more to plan than to run.
func (c claimEnds) update(b *pgx.Batch, group string, lease [16]byte, set string) {
	if len(c.ids) == 0 {
		return
	}
	if len(c.ids) == 1 {
		b.Queue(claimEndsSQL(set, false), c.ids[0], c.ends[0], c.sizes[0], group, lease)
		return
	}
	groups := make([]string, len(c.ids))
	for i := range groups {
		groups[i] = group
	}
	b.Queue(claimEndsSQL(set, true), c.ids, c.ends, c.sizes, groups, lease)
}

// claimEndsSQL is the update of claimEnds.update, for several partitions (arrays) or one
// (scalars). Several go with the group repeated as a column of their own: on a generic plan
// made while the table was small, the group as a parameter beside the join made the plan read
// every cursor of the group once and join them to the partitions by a filter
// (TestCursorStatementsPlannedOnOneRowReadByKey).
func claimEndsSQL(set string, several bool) string {
	from := `(SELECT $1::uuid, $2::int8, $3::int4, $4::text)`
	if several {
		from = `unnest($1::uuid[], $2::int8[], $3::int4[], $4::text[])`
	}
	return `UPDATE queen.partition_consumers pc SET ` + set + ` FROM ` + from + ` AS v(id, seq, n, g)
		WHERE pc.partition_id = v.id AND pc.consumer_group = v.g AND pc.lease_id = $5`
}

// query runs a statement of the transaction; the first one travels with BEGIN (and p.setup) in
// the same round trip. The rows must be closed before the next statement.
func (p *popTx) query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if p.begun {
		return p.conn.Query(ctx, sql, args...)
	}
	p.begun = true
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	if p.setup != "" {
		b.Queue(p.setup)
	}
	b.Queue(sql, args...)
	br := p.conn.SendBatch(ctx, b)
	for range b.Len() - 1 {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return batchRows{rows, br}, nil
}

// batchRows are the rows of a batch's last statement: closing them ends the batch. An error
// of the statement is the rows' error, as for a query of its own.
type batchRows struct {
	pgx.Rows
	br pgx.BatchResults
}

func (r batchRows) Close() {
	r.Rows.Close()
	r.br.Close()
}

// claimRows runs a claim statement of the transaction. With commit, COMMIT travels in the same
// round trip: a wildcard pop's claim, which most often needs no bookkeeping after it (see
// leaseEndGuess), so that the pop takes two round trips instead of three. A pop that goes on
// after it (the claim came back short) opens a new transaction; one whose claims need
// bookkeeping runs it in a transaction of its own (popTx.bookkeeping). Either way, what the
// committed claim leased is the pop's: nobody else can read it before the lease ends.
func (p *popTx) claimRows(ctx context.Context, commit bool, sql string, args ...any) (pgx.Rows, error) {
	if !commit {
		return p.conn.Query(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	b.Queue("COMMIT")
	br := p.conn.SendBatch(ctx, b)
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &committingRows{Rows: rows, br: br, p: p}, nil
}

// committingRows are a claim's rows followed by COMMIT: closing them reads COMMIT's answer,
// whose error is then the rows' error.
type committingRows struct {
	pgx.Rows
	br        pgx.BatchResults
	p         *popTx
	commitErr error
}

func (r *committingRows) Close() {
	r.Rows.Close()
	if r.br == nil {
		return
	}
	if r.Rows.Err() == nil {
		if _, r.commitErr = r.br.Exec(); r.commitErr == nil {
			r.p.begun = false
		}
	}
	if err := r.br.Close(); r.commitErr == nil && r.Rows.Err() == nil {
		r.commitErr = err
	}
	r.br = nil
}

func (r *committingRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.commitErr
}

type popCandidate struct {
	id        uuid.UUID
	name      string
	lastSeq   int64 // as the wildcard search saw it
	waiting   int64 // messages after the group's cursor as the wildcard search saw them
	leaseTime int
	delay     int
	hasRow    bool
}

func (p *popTx) popPartition(ctx context.Context, r PopRequest, res *PopResult) error {
	var c popCandidate
	var windowActive, leased bool
	// last_message_at is NULL on a partition that never received a message (configure's Default).
	rows, err := p.query(ctx, `
		SELECT p.id, p.name, q.lease_time, q.delayed_processing, pc.partition_id IS NOT NULL,
		       COALESCE(q.window_buffer > 0 AND p.last_message_at > now() - make_interval(secs => q.window_buffer), false),
		       COALESCE(pc.lease_expires_at > now(), false)
		FROM queen.queues q
		JOIN queen.partitions p ON p.queue_id = q.id AND p.name = $2
		LEFT JOIN queen.partition_consumers pc ON pc.partition_id = p.id AND pc.consumer_group = $3
		WHERE q.name = $1`, p.queue, r.Partition, r.Group)
	if err != nil {
		return fmt.Errorf("cannot find partition %s/%s: %w", r.Queue, r.Partition, err)
	}
	found := rows.Next()
	if found {
		err = rows.Scan(&c.id, &c.name, &c.leaseTime, &c.delay, &c.hasRow, &windowActive, &leased)
	}
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return fmt.Errorf("cannot find partition %s/%s: %w", r.Queue, r.Partition, err)
	}
	if !found {
		res.Outcome = PopPartitionNotFound
		return nil
	}
	switch {
	case windowActive:
		res.Outcome = PopWindowBufferActive
		return nil
	case leased:
		res.Outcome = PopLeaseHeld
		return nil
	}
	claimed, err := p.claimAndRead(ctx, r, c, r.Batch, false, res)
	if err != nil {
		return err
	}
	if !claimed {
		res.Outcome = PopLeaseHeld
	}
	return nil
}

// Claims lease one partition for a group and return the group's cursor and the lease's end as
// the claim set it (no row: not claimed), as the claim CTE of claimAndRead's statement. $1
// partition, $2 group, $3 the cursor of a new row (claimWait, claimNew) or the last_seq the
// search saw (claimIdle), $4 lease id, $5 lease seconds, $6 the most messages the claim reads.
//
// claimIdle, the claim of most wildcard pops, also sets where the lease ends as if the window
// after the cursor held every message up to the partition's last_seq (leaseEndGuess); the pop
// checks that against what it read (claimRead.finish) and, when it holds, commits with the
// claim instead of one round trip later. claimWait and claimNew answer -1: no guess.
//
// A wildcard pop keeps the rows it claimed locked while it tries the next partitions, and an ack
// locks the rows of its batch in key order, so a wildcard claim that waited for a row could
// close a cycle with an ack that holds that row and waits for one of the pop's: PostgreSQL would
// break it only after deadlock_timeout (a second). Wildcard claims therefore never wait:
// claimIdle skips a row another transaction holds, claimNew gives way to a row that exists
// already. A specific-partition pop holds no other row, so claimWait may wait.
var (
	claimWait = `
		INSERT INTO queen.partition_consumers AS pc
			(partition_id, consumer_group, cursor_seq, lease_id, lease_acquired_at, lease_expires_at)
		VALUES ($1::uuid, $2::text, $3::int8, $4::uuid, now(), now() + make_interval(secs => $5))
		ON CONFLICT (partition_id, consumer_group) DO UPDATE
		SET lease_id = EXCLUDED.lease_id, lease_acquired_at = now(), lease_expires_at = EXCLUDED.lease_expires_at
		WHERE pc.lease_expires_at IS NULL OR pc.lease_expires_at <= now()
		RETURNING pc.cursor_seq, -1::int8 AS lease_end_seq`
	// claimIdle also checks, on the row as it is now, that the group has not read up to what
	// the search saw: the search's snapshot is older than the pop that consumed a partition
	// and committed meanwhile.
	claimIdle = `
		WITH idle AS (
			SELECT partition_id, consumer_group, ` + leaseEndGuess("cursor_seq", "$6", "$1") + ` AS lease_end
			FROM queen.partition_consumers
			WHERE partition_id = $1 AND consumer_group = $2 AND cursor_seq < $3
			  AND (lease_expires_at IS NULL OR lease_expires_at <= now())
			FOR UPDATE SKIP LOCKED)
		UPDATE queen.partition_consumers AS pc
		SET lease_id = $4, lease_acquired_at = now(), lease_expires_at = now() + make_interval(secs => $5),
			lease_end_seq = idle.lease_end, batch_size = idle.lease_end - pc.cursor_seq
		FROM idle WHERE pc.partition_id = idle.partition_id AND pc.consumer_group = idle.consumer_group
		RETURNING pc.cursor_seq, pc.lease_end_seq`
	claimNew = `
		INSERT INTO queen.partition_consumers
			(partition_id, consumer_group, cursor_seq, lease_id, lease_acquired_at, lease_expires_at)
		VALUES ($1::uuid, $2::text, $3::int8, $4::uuid, now(), now() + make_interval(secs => $5))
		ON CONFLICT (partition_id, consumer_group) DO NOTHING
		RETURNING cursor_seq, -1::int8 AS lease_end_seq`
)

// leaseEndGuess is the SQL of where a claim's lease ends if the window of up to limit sequence
// numbers after cursor holds every message of partition up to its last_seq: no message
// deleted, none held back by delayed processing. The partition's last_seq is read in the
// claim's snapshot, as are the segments the claim reads.
func leaseEndGuess(cursor, limit, partition string) string {
	return `LEAST(` + cursor + ` + ` + limit + `, (SELECT p.last_seq FROM queen.partitions p WHERE p.id = ` + partition + `))`
}

// claimAndRead leases one partition for the group and reads up to limit messages after the
// group's cursor, in one statement (see claimStatement and readClaim).
func (p *popTx) claimAndRead(ctx context.Context, r PopRequest, c popCandidate, limit int, skipBusy bool, res *PopResult) (bool, error) {
	sql, args, err := p.claimStatement(ctx, r, c, limit, skipBusy)
	if err != nil {
		return false, err
	}
	rows, err := p.claimRows(ctx, skipBusy && !r.AutoAck, sql, args...)
	if err != nil {
		return false, fmt.Errorf("cannot lease partition %s: %w", c.id, err)
	}
	return p.readClaim(rows, r, c, skipBusy, res)
}

// claimStatement is the statement that leases partition c for the group and reads up to limit
// messages after the group's cursor. A wildcard claim (skipBusy) never waits for a row lock and
// does not claim a partition the group has read up to since the search. The statement answers
// no row when the claim failed, and one row with NULL message columns when it succeeded on an
// empty partition.
func (p *popTx) claimStatement(ctx context.Context, r PopRequest, c popCandidate, limit int, skipBusy bool) (string, []any, error) {
	claim, seed, err := p.claimSeed(ctx, r, c, skipBusy)
	if err != nil {
		return "", nil, err
	}
	return claimReadSQL(claim), []any{[16]byte(c.id), r.Group, seed, [16]byte(r.LeaseID), leaseSeconds(c), limit, c.delay}, nil
}

// claimSeed picks c's claim (claimWait, claimIdle, claimNew) and its $3: the last_seq the
// search saw for a row the group has, or where a row the claim creates starts.
func (p *popTx) claimSeed(ctx context.Context, r PopRequest, c popCandidate, skipBusy bool) (string, int64, error) {
	seed := int64(0)
	if !c.hasRow && r.Group != QueueMode {
		var err error
		if seed, err = subscriptionSeed(ctx, p.conn, p.queue, r, c); err != nil {
			return "", 0, err
		}
	}
	switch {
	case skipBusy && c.hasRow:
		return claimIdle, c.lastSeq, nil
	case skipBusy:
		return claimNew, seed, nil
	}
	return claimWait, seed, nil
}

// leaseSeconds is how long a claim of c leases it: the queue's lease time, 60 s when unset.
func leaseSeconds(c popCandidate) int {
	if c.leaseTime <= 0 {
		return 60
	}
	return c.leaseTime
}

// claimReadSQL is the statement of a claim (claimWait, claimIdle, claimNew) that reads the
// partition's next messages, a window of $6 sequence numbers, with the queue's delayed
// processing in $7 seconds (see claimWindowSQL).
func claimReadSQL(claim string) string {
	return `
		WITH claim AS (` + claim + `)
		` + claimWindowSQL("claim.cursor_seq, claim.lease_end_seq, ", "claim", "$1", "$6", "$7")
}

// claimManySQL claims several partitions of a wildcard pop, and reads each one's window, in
// one statement. A pop of 100 at 100,000 partitions of five messages claims 20, and as 20
// statements of claimReadSQL those took 1.4 ms per pop, against 0.97 ms as one of these
// (docs/performance.md, seventh round): each statement is started, planned from its cached
// plan and finished once instead of 20 times. It is claimIdle for the partitions the group has a row
// for and claimNew for the others, each candidate a row of the arrays: $1 partition, $2 group
// (a column, not a parameter, so that each cursor is probed by its whole key; see keyedPlans),
// $3 the last_seq the search saw or the cursor of a new row, $4 whether the row exists, $5 the
// most messages to read; $6 lease id, $7 lease seconds, $8 delayed processing. Rows come in
// candidate order (the first column, from 1), each candidate's as claimReadSQL's; a candidate
// not claimed has none.
var claimManySQL = `
	WITH v AS MATERIALIZED (
		SELECT * FROM unnest($1::uuid[], $2::text[], $3::int8[], $4::bool[], $5::int4[])
			WITH ORDINALITY AS v(id, g, seed, has_row, lim, ord)),
	idle AS (
		SELECT pc.partition_id, pc.consumer_group, ` + leaseEndGuess("pc.cursor_seq", "v.lim", "v.id") + ` AS lease_end
		FROM v JOIN queen.partition_consumers pc ON pc.partition_id = v.id AND pc.consumer_group = v.g
		WHERE v.has_row AND pc.cursor_seq < v.seed
		  AND (pc.lease_expires_at IS NULL OR pc.lease_expires_at <= now())
		FOR UPDATE OF pc SKIP LOCKED),
	leased AS (
		UPDATE queen.partition_consumers AS pc
		SET lease_id = $6, lease_acquired_at = now(), lease_expires_at = now() + make_interval(secs => $7),
			lease_end_seq = idle.lease_end, batch_size = idle.lease_end - pc.cursor_seq
		FROM idle WHERE pc.partition_id = idle.partition_id AND pc.consumer_group = idle.consumer_group
		RETURNING pc.partition_id, pc.cursor_seq, pc.lease_end_seq),
	created AS (
		INSERT INTO queen.partition_consumers
			(partition_id, consumer_group, cursor_seq, lease_id, lease_acquired_at, lease_expires_at)
		SELECT v.id, v.g, v.seed, $6, now(), now() + make_interval(secs => $7) FROM v WHERE NOT v.has_row
		ON CONFLICT (partition_id, consumer_group) DO NOTHING
		RETURNING partition_id, cursor_seq, -1::int8),
	claim AS (SELECT * FROM leased UNION ALL SELECT * FROM created)
	` + claimWindowSQL("v.ord, claim.cursor_seq, claim.lease_end_seq, ", "v JOIN claim ON claim.partition_id = v.id", "v.id", "v.lim", "$8") + `
	ORDER BY v.ord, s.last_seq`

// claimWindowSQL reads, for each claim of from (a relation with the claim's cursor_seq), the
// partition's next messages: a window of limit sequence numbers from the first segment after
// the group's cursor (segments deleted with all their messages leave gaps), one row per
// segment, its arrays cut to the window (the first column after lead is the seq of the first
// message sent), with whether the segment is older than the queue's delayed processing (delay
// seconds). PostgreSQL sends a segment's arrays as stored instead of a row per message, and
// claimRead walks them. The segments come from the (partition_id, last_seq) index in sequence
// order, between the window's start and the last seq a segment holding its last message can end
// at (a segment holds at most segmentSize messages), at most limit of them: the read stops after
// the segments it needs however long the backlog and whatever plan the statement got. claimRead
// checks the order.
func claimWindowSQL(lead, from, partition, limit, delay string) string {
	return `SELECT ` + lead + `s.first_seq + s.lo - 1, COALESCE(s.created_at, 'epoch'), s.created_at <= now() - make_interval(secs => ` + delay + `),
		       s.ids[s.lo:s.hi], s.transaction_ids[s.lo:s.hi], s.trace_ids[s.lo:s.hi], s.payloads[s.lo:s.hi],
		       s.encrypted[s.lo:s.hi], s.producer_subs[s.lo:s.hi]
		FROM ` + from + `
		LEFT JOIN LATERAL (
			SELECT GREATEST(claim.cursor_seq, f.first_seq - 1) AS base FROM queen.segments f
			WHERE f.partition_id = ` + partition + ` AND f.last_seq > claim.cursor_seq
			ORDER BY f.last_seq LIMIT 1) w ON true
		LEFT JOIN LATERAL (
			SELECT s.*, GREATEST(1, w.base - s.first_seq + 2) AS lo, LEAST(s.last_seq, w.base + ` + limit + `) - s.first_seq + 1 AS hi
			FROM queen.segments s
			WHERE s.partition_id = ` + partition + ` AND s.last_seq > w.base
			  AND s.last_seq < w.base + ` + limit + ` + ` + strconv.Itoa(segmentSize) + ` AND s.first_seq <= w.base + ` + limit + `
			ORDER BY s.last_seq LIMIT ` + limit + `) s ON true`
}

// readClaim reads the answer of c's claimStatement into res, closing rows, and queues the
// bookkeeping of the claim (see claimRead).
func (p *popTx) readClaim(rows pgx.Rows, r PopRequest, c popCandidate, skipBusy bool, res *PopResult) (bool, error) {
	cr := p.newClaimRead(r, c, skipBusy, res)
	for rows.Next() {
		if !cr.claimed {
			if err := binaryColumns(rows.FieldDescriptions()); err != nil {
				rows.Close()
				return false, fmt.Errorf("cannot read partition %s: %w", c.id, err)
			}
		}
		if err := cr.row(rows.RawValues()); err != nil {
			rows.Close()
			return false, err
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("cannot lease partition %s: %w", c.id, err)
	}
	return cr.finish(), nil
}

// claimRead reads one claim's rows (claimWindowSQL's columns) into a pop's result. A claim
// that finds nothing visible releases the lease again; for a wildcard pop (skipBusy) such a
// partition is not reported as claimed. A claim whose window held only deleted messages moves
// the group's cursor past them, so the next claim reads on.
type claimRead struct {
	p        *popTx
	r        PopRequest
	c        popCandidate
	skipBusy bool
	res      *PopResult
	part     Partition
	start    int // the claim's messages are res.Messages[start:end], once claimed
	end      int
	claimed  bool // a row came: the claim succeeded
	// The group's cursor when claimed, and where the claim set the lease to end: -1 when it
	// did not (see leaseEndGuess).
	cursor, leaseEnd int64
	cut              bool // delayedProcessing: the messages from here on are too young
	// deletedTo is the last deleted message of the window, 0 when none.
	deletedTo int64
	// Room for what the search saw waiting, or for a segment when it did not look (a pop of a
	// named partition): a pop of one message with a batch of 10,000 must not allocate 10,000.
	wantCapacity int
}

func (p *popTx) newClaimRead(r PopRequest, c popCandidate, skipBusy bool, res *PopResult) *claimRead {
	cr := &claimRead{p: p, r: r, c: c, skipBusy: skipBusy, res: res, part: Partition{ID: c.id, Name: c.name},
		wantCapacity: min(r.Batch, segmentSize)}
	if c.waiting > 0 {
		cr.wantCapacity = int(min(c.waiting, int64(r.Batch)))
	}
	return cr
}

// row reads one row of the claim, as PostgreSQL sent it, in binary (the row's own bytes until
// the next row): the claim's cursor and lease end, then claimWindowSQL's columns. Payloads and
// transactionIds are copied into the arenas, the rest decoded in place. The payload is the
// JSON the boundary validated on its way in and is not parsed again.
func (cr *claimRead) row(v [][]byte) error {
	p, res, id := cr.p, cr.res, cr.c.id
	if len(v) != 11 || len(v[0]) != 8 || len(v[1]) != 8 {
		return fmt.Errorf("cannot read partition %s: %d columns", id, len(v))
	}
	if !cr.claimed {
		cr.claimed, cr.start, cr.end = true, len(res.Messages), len(res.Messages)
		cr.cursor, cr.leaseEnd = int64(binary.BigEndian.Uint64(v[0])), int64(binary.BigEndian.Uint64(v[1]))
	}
	v = v[2:]
	// No segment: the claim succeeded on a caught-up partition. delayedProcessing: stop at the
	// first segment still too young, keeping FIFO.
	if v[0] == nil || cr.cut || len(v[2]) != 1 || v[2][0] == 0 {
		cr.cut = true
		return nil
	}
	if len(v[0]) != 8 || len(v[1]) != 8 {
		return fmt.Errorf("cannot read partition %s: %w", id, errBadArray)
	}
	first := int64(binary.BigEndian.Uint64(v[0]))
	createdAt := pgEpoch.Add(time.Duration(int64(binary.BigEndian.Uint64(v[1]))) * time.Microsecond)
	cols := v[3:9]
	var a [6]binaryArray // ids, transactionIds, traceIds, payloads, encrypted flags, producer subs
	for k := range a {
		a[k] = newBinaryArray(cols[k])
	}
	// An array's bytes bound its elements' bytes: one block each for the row's transactionIds
	// and payloads.
	p.txIDs.reserve(len(cols[1]))
	p.payloads.reserve(len(cols[3]))
	for seq := first; a[0].left > 0; seq++ {
		mid, txID, trace, payload, enc, sub := a[0].next(), a[1].next(), a[2].next(), a[3].next(), a[4].next(), a[5].next()
		for _, x := range a {
			if x.err != nil {
				return fmt.Errorf("cannot read partition %s: the segment at %d: %w", id, first, x.err)
			}
		}
		if n := len(res.Messages); n > cr.start && res.Messages[n-1].Seq >= seq {
			return fmt.Errorf("cannot read partition %s: message %d came after %d", id, seq, res.Messages[n-1].Seq)
		}
		if mid == nil {
			cr.deletedTo = seq
			continue
		}
		if len(mid) != 16 || (trace != nil && len(trace) != 16) || len(enc) != 1 {
			return fmt.Errorf("cannot read partition %s: message %d: %w", id, seq, errBadArray)
		}
		if res.Messages == nil {
			res.Messages = make([]Message, 0, cr.wantCapacity)
		}
		m := Message{Seq: seq, ID: uuid.UUID(mid), TransactionID: p.txIDs.string(txID), Payload: p.payloads.bytes(payload),
			CreatedAt: createdAt, ProducerSub: string(sub), Encrypted: enc[0] != 0, Partition: cr.part}
		if trace != nil {
			m.TraceID = uuid.NullUUID{UUID: uuid.UUID(trace), Valid: true}
		}
		res.Messages = append(res.Messages, m)
	}
	cr.end = len(res.Messages)
	return nil
}

// finish queues the bookkeeping of the claim once its rows are read, and reports whether the
// partition counts as claimed.
func (cr *claimRead) finish() bool {
	if !cr.claimed {
		return false
	}
	p, c, res := cr.p, cr.c, cr.res
	got := res.Messages[cr.start:cr.end]
	switch {
	case len(got) == 0 && cr.deletedTo > 0:
		p.skipped.add(c.id, cr.deletedTo, 0)
		if cr.skipBusy {
			return false
		}
	case len(got) == 0:
		p.released = append(p.released, [16]byte(c.id))
		if cr.skipBusy {
			return false
		}
	case cr.r.AutoAck:
		p.consumed.add(c.id, got[len(got)-1].Seq, len(got))
	case !cr.asClaimed(got):
		p.leased.add(c.id, got[len(got)-1].Seq, len(got))
	}
	res.Partitions = append(res.Partitions, cr.part)
	return true
}

// asClaimed reports whether the claim already set the lease to end where got, what it
// delivered, ends, with got's size: every message after the cursor up to that end.
func (cr *claimRead) asClaimed(got []Message) bool {
	n := int64(len(got))
	return cr.leaseEnd >= 0 && got[0].Seq == cr.cursor+1 && got[n-1].Seq == cr.leaseEnd && n == cr.leaseEnd-cr.cursor
}

// subscriptionSeed returns the cursor a named group starts from on a partition it has never
// read: after every message created at or before the group's subscription time, or 0 (the
// beginning) when the group subscribed to all history. queue is r.Queue's stored name.
func subscriptionSeed(ctx context.Context, tx *pgx.Conn, queue string, r PopRequest, c popCandidate) (int64, error) {
	scope := r.Partition // "" for a wildcard pop: the subscription covers the whole queue
	if r.SubscribeNow || r.SubscribeFrom != nil {
		mode := "timestamp"
		if r.SubscribeNow {
			mode = "new"
		}
		// The group's first pop decides its origin; ON CONFLICT keeps the first one. A nil
		// SubscribeFrom with SubscribeNow means the database's now().
		_, err := tx.Exec(ctx, `
			INSERT INTO queen.consumer_groups_metadata (consumer_group, queue_name, partition_name, subscription_mode, subscription_timestamp)
			VALUES ($1, $2, $3, $4, COALESCE($5::timestamptz, now()))
			ON CONFLICT DO NOTHING`, r.Group, queue, scope, mode, r.SubscribeFrom)
		if err != nil {
			return 0, fmt.Errorf("cannot record the subscription of group %s: %w", r.Group, err)
		}
	}
	var seed int64
	err := tx.QueryRow(ctx, `
		WITH sub AS (
			SELECT subscription_timestamp AS ts FROM queen.consumer_groups_metadata
			WHERE consumer_group = $1 AND queue_name = $2 AND partition_name IN ($3, '')
			ORDER BY partition_name DESC LIMIT 1)
		SELECT CASE
			WHEN NOT EXISTS (SELECT 1 FROM sub) THEN 0
			WHEN p.last_message_at IS NULL OR p.last_message_at <= (SELECT ts FROM sub) THEN p.last_seq
			ELSE (SELECT COALESCE(max(s.last_seq), 0) FROM queen.segments s
			      WHERE s.partition_id = p.id AND s.created_at <= (SELECT ts FROM sub))
		END
		FROM queen.partitions p WHERE p.id = $4`, r.Group, queue, c.name, c.id).Scan(&seed)
	if err != nil {
		return 0, fmt.Errorf("cannot compute the start of group %s on partition %s: %w", r.Group, c.id, err)
	}
	return seed, nil
}

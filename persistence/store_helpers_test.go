package persistence_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"queen/persistence"
	"queen/pg"
	"queen/pg/pgtest"
)

// storeEnv is one test's Store on a database of its own, with the SQL reads that check what
// the Store wrote.
type storeEnv struct {
	t    *testing.T
	ctx  context.Context
	pool *pgxpool.Pool
	s    *persistence.Store
}

func newStoreEnv(t *testing.T) *storeEnv {
	pool, _ := pgtest.NewPool(t)
	return &storeEnv{t: t, ctx: retentionCtx(t), pool: pool, s: persistence.NewStore(pool)}
}

// items builds one push item per transactionId; the payload names the transactionId and the
// call, so a stored payload tells which push wrote it.
func items(queue, partition, call string, txIDs ...string) []persistence.PushItem {
	out := make([]persistence.PushItem, len(txIDs))
	for i, tx := range txIDs {
		out[i] = persistence.PushItem{Queue: persistence.QueueName{Name: queue}, Partition: partition, TransactionID: tx,
			Payload: payloadOf(tx, call)}
	}
	return out
}

func payloadOf(tx, call string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"call": %q, "tx": %q}`, call, tx))
}

func (e *storeEnv) push(it ...persistence.PushItem) []persistence.PushResult {
	e.t.Helper()
	res, err := e.s.Push(e.ctx, it)
	if err != nil {
		e.t.Fatalf("push: %v", err)
	}
	if len(res) != len(it) {
		e.t.Fatalf("push of %d items answered %d results", len(it), len(res))
	}
	return res
}

// pop runs r with the defaults of a plain pop (queue mode, one partition, a fresh lease) for
// the fields left zero, and returns the result with the lease it asked for.
func (e *storeEnv) pop(r persistence.PopRequest) (persistence.PopResult, string) {
	e.t.Helper()
	if r.Group == "" {
		r.Group = persistence.QueueMode
	}
	if r.Partitions == 0 {
		r.Partitions = 1
	}
	if r.LeaseID == uuid.Nil {
		r.LeaseID = uuid.New()
	}
	res, err := e.s.Pop(e.ctx, r)
	if err != nil {
		e.t.Fatalf("pop %+v: %v", r, err)
	}
	return res, r.LeaseID.String()
}

func (e *storeEnv) ack(it ...persistence.AckItem) []persistence.AckResult {
	e.t.Helper()
	res, err := e.s.Ack(e.ctx, it)
	if err != nil {
		e.t.Fatalf("ack: %v", err)
	}
	return res
}

func (e *storeEnv) exec(sql string, args ...any) {
	e.t.Helper()
	retentionExec(e.t, e.pool, sql, args...)
}

// setQueue changes a stored queue's settings, e.g. setQueue("q", "retry_limit = 0").
func (e *storeEnv) setQueue(queue, assignments string) {
	e.t.Helper()
	e.exec(`UPDATE queen.queues SET `+assignments+` WHERE name = $1`, queue)
}

// encryptQueue creates queue flagged encryption_enabled.
func (e *storeEnv) encryptQueue(queue string) {
	e.t.Helper()
	if _, err := e.s.Configure(e.ctx, persistence.ConfigureRequest{Queue: persistence.QueueName{Name: queue},
		Options: persistence.QueueOptionsPatch{EncryptionEnabled: new(true)}}); err != nil {
		e.t.Fatal(err)
	}
}

// expireLease moves the lease of (partition, group) into the past, as if its time had run out.
func (e *storeEnv) expireLease(partition uuid.UUID, group string) {
	e.t.Helper()
	e.exec(`UPDATE queen.partition_consumers SET lease_expires_at = now() - interval '1 second'
		WHERE partition_id = $1 AND consumer_group = $2 AND lease_id IS NOT NULL`, partition, group)
}

// awaitLockWait returns once a session of the test's database waits for a lock, and fails the
// test if finished reports true first (the statement expected to block did not).
func (e *storeEnv) awaitLockWait(finished func() bool) {
	e.t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for e.count(`SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`) == 0 {
		if finished() {
			e.t.Fatal("the statement expected to wait for a lock finished without waiting")
		}
		select {
		case <-tick.C:
		case <-e.ctx.Done():
			e.t.Fatal("no session waited for a lock")
		}
	}
}

// popped is what a pop run in the background returned.
type popped struct {
	res persistence.PopResult
	err error
}

// popInBackground runs r off the test's goroutine, so that the test can watch it wait for, or
// skip, a row another transaction holds; the answer arrives on the channel.
func (e *storeEnv) popInBackground(r persistence.PopRequest) <-chan popped {
	done := make(chan popped, 1)
	go func() {
		res, err := e.s.Pop(e.ctx, r)
		done <- popped{res, err}
	}()
	return done
}

// awaitNoLockWait returns what a statement run in the background sends on done, and fails the
// test if a session of the test's database waits for a lock before it is sent (the statement
// was expected not to wait).
func awaitNoLockWait[T any](e *storeEnv, done <-chan T) T {
	e.t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case v := <-done:
			return v
		case <-tick.C:
			if n := e.count(`SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`); n > 0 {
				e.t.Fatal("a session waits for a lock")
			}
		case <-e.ctx.Done():
			e.t.Fatal("the statement did not finish")
		}
	}
}

// insertMessages stores a message for each row of rows (a SELECT of partition_id, seq and
// transactionId), each as a segment of its own, as the upgrade leaves the messages it carries.
func (e *storeEnv) insertMessages(rows string, args ...any) {
	e.t.Helper()
	e.exec(`WITH v AS (`+rows+`),
		s AS (INSERT INTO queen.segments (partition_id, last_seq, first_seq, ids, transaction_ids, trace_ids, payloads, encrypted, producer_subs)
			SELECT v.p, v.s, v.s, ARRAY[gen_random_uuid()], ARRAY[v.tx], ARRAY[NULL::uuid], ARRAY['{}'], ARRAY[false], ARRAY[NULL::text]
			FROM v AS v(p, s, tx))
		INSERT INTO queen.message_transactions (partition_id, transaction_id, seq) SELECT p, tx, s FROM v AS v(p, s, tx)`, args...)
}

// age makes the segments holding the given transactionIds as old as interval (a PostgreSQL
// interval): a segment has one created_at, so a test that ages single messages pushes them one
// by one.
func (e *storeEnv) age(interval string, txIDs ...string) {
	e.t.Helper()
	e.exec(`UPDATE queen.segments SET created_at = now() - $1::interval WHERE transaction_ids && $2::text[]`, interval, txIDs)
}

// storedMessage is a row of queen.messages.
type storedMessage struct {
	Seq     int64
	ID      uuid.UUID
	TxID    string
	Payload string
}

// stored lists a partition's messages in sequence order.
func (e *storeEnv) stored(partition uuid.UUID) []storedMessage {
	e.t.Helper()
	return collect[storedMessage](e, `SELECT seq, id, transaction_id, payload::text FROM queen.messages
		WHERE partition_id = $1 ORDER BY seq`, partition)
}

// consumerRow is the part of a partition_consumers row that pop and ack move.
type consumerRow struct {
	Cursor   int64
	LeaseID  string // "" when no lease is held
	LeaseEnd int64
	Retries  int
	Consumed int64
	Batches  int64
}

// consumer reads the row of (partition, group); the zero row when there is none.
func (e *storeEnv) consumer(partition uuid.UUID, group string) consumerRow {
	e.t.Helper()
	rows := collect[consumerRow](e, `SELECT cursor_seq, COALESCE(lease_id::text, ''), lease_end_seq,
			batch_retry_count, total_messages_consumed, total_batches_consumed
		FROM queen.partition_consumers WHERE partition_id = $1 AND consumer_group = $2`, partition, group)
	if len(rows) == 0 {
		return consumerRow{}
	}
	return rows[0]
}

// deadLetter is a row of queen.dead_letter_queue.
type deadLetter struct {
	Seq     int64
	Group   string
	Error   string
	Retries int
}

func (e *storeEnv) deadLetters(partition uuid.UUID) []deadLetter {
	e.t.Helper()
	return collect[deadLetter](e, `SELECT message_seq, consumer_group, COALESCE(error_message, ''), retry_count
		FROM queen.dead_letter_queue WHERE partition_id = $1 ORDER BY message_seq`, partition)
}

// count runs a SELECT count(*) ... statement.
func (e *storeEnv) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(e.ctx, sql, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// collect reads the rows of sql into structs, column by column.
func collect[T any](e *storeEnv, sql string, args ...any) []T {
	e.t.Helper()
	rows, err := e.pool.Query(e.ctx, sql, args...)
	if err == nil {
		var out []T
		if out, err = pgx.CollectRows(rows, pgx.RowToStructByPos[T]); err == nil {
			return out
		}
	}
	e.t.Fatalf("%s: %v", sql, err)
	return nil
}

// txIDs and seqs list what a pop delivered, in delivery order.
func txIDs(ms []persistence.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.TransactionID
	}
	return out
}

func seqs(ms []persistence.Message) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.Seq
	}
	return out
}

// ackOf acknowledges a delivered message for group under lease ("" for none).
func ackOf(m persistence.Message, group, lease string, status persistence.AckStatus) persistence.AckItem {
	return persistence.AckItem{PartitionID: m.Partition.ID, TransactionID: m.TransactionID, Group: group,
		LeaseID: lease, Status: status}
}

// ownLease, as a lease in a test table, stands for the lease of the test's pop; strangerLease
// is a lease that nobody holds.
const (
	ownLease      = "own"
	strangerLease = "6a1d7c4e-0000-4000-8000-000000000000"
)

func resolveLease(lease, own string) string {
	if lease == ownLease {
		return own
	}
	return lease
}

// checkConsumer compares the row of (partition, group) with want; want.LeaseID may be ownLease.
func (e *storeEnv) checkConsumer(partition uuid.UUID, group, own string, want consumerRow) {
	e.t.Helper()
	want.LeaseID = resolveLease(want.LeaseID, own)
	if got := e.consumer(partition, group); got != want {
		e.t.Errorf("consumer row of %s: %+v, want %+v", group, got, want)
	}
}

func (e *storeEnv) checkDeadLetters(partition uuid.UUID, want []deadLetter) {
	e.t.Helper()
	if got := e.deadLetters(partition); !slices.Equal(got, want) {
		e.t.Errorf("dead letters %+v, want %+v", got, want)
	}
}

// prepareOnBrokerConn prepares sql as name on a connection set up as the broker's are
// (persistence.Open), held until the test ends: the plan tests make a plan now, while the tables
// are nearly empty, and count what it reads once they have grown.
func (e *storeEnv) prepareOnBrokerConn(name, sql string) *pgxpool.Conn {
	e.t.Helper()
	s, err := persistence.Open(e.ctx, e.pool.Config().ConnString(), pg.PoolOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(s.Close)
	conn, err := s.Pool().Acquire(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(conn.Release)
	if _, err := conn.Exec(e.ctx, "PREPARE "+name+" AS "+sql); err != nil {
		e.t.Fatal(err)
	}
	return conn
}

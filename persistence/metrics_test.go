package persistence_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"queen/persistence"
)

// ReadMetrics counts the backlog of every queue from the first message still stored after
// the queue-mode cursor, the dead letters of every queue, the backlog of every named group
// on the partitions it reads, and sums the brokers' counters.
func TestReadMetrics(t *testing.T) {
	e := newStoreEnv(t)
	for _, tx := range []string{"a1", "a2", "a3", "a4", "a5"} { // one push each, to age them apart
		e.push(items("q1", "p0", "c", tx)...)
	}
	b := e.push(items("q1", "p1", "c", "b1", "b2", "b3")...)
	e.push(items("q2", "p0", "c", "c1", "c2")...)
	e.push(items("idle", "p0", "c", "d1")...)
	e.setQueue("q2", "retry_limit = 0")

	// Queue mode consumes two messages of q1/p0; idle's only message too.
	res, lease := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q1"}, Partition: "p0", Batch: 2})
	for _, m := range res.Messages {
		e.ack(ackOf(m, persistence.QueueMode, lease, persistence.AckCompleted))
	}
	e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "idle"}, Batch: 1, AutoAck: true})
	// Retention took b1 unread; a3, the oldest left in q1, is an hour old.
	if found, err := e.s.DeleteMessage(e.ctx, b[0].PartitionID, "b1"); !found || err != nil {
		t.Fatalf("delete b1: %v %v", found, err)
	}
	e.age("1 hour", "a3")
	// q2's first message fails with no retries left: dead-lettered.
	res, lease = e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q2"}, Batch: 1})
	if r := e.ack(ackOf(res.Messages[0], persistence.QueueMode, lease, persistence.AckFailed)); !r[0].DLQ {
		t.Fatalf("ack failed with retryLimit 0: %+v", r[0])
	}
	// Group g read one message of q1/p0 and none of p1 (no cursor there); group h is caught up.
	e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q1"}, Partition: "p0", Group: "g", Batch: 1, AutoAck: true})
	e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q2"}, Group: "h", Batch: 10, AutoAck: true})
	e.age("2 hours", "a2")

	// Two brokers' flushes add to their lifetime rows; the read sums them.
	for server, counted := range map[string]map[string]int64{
		"broker-a": {"push_messages": 2, "dlq": 0},
		"broker-b": {"push_messages": 3, "pop_messages": 1},
	} {
		var b persistence.BrokerStats
		b.SetCounters(counted)
		if _, err := e.s.FlushStats(e.ctx, persistence.StatsFlush{ServerID: server, Bucket: time.Now().Truncate(time.Minute), Broker: b}); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := e.s.ReadMetrics(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range snap.Counters {
		want := map[string]int64{"push_messages": 5, "pop_messages": 1}[name]
		if v != want {
			t.Errorf("cluster counter %s = %d, want %d", name, v, want)
		}
	}
	if len(snap.Counters) == 0 {
		t.Error("the read returned no cluster counter")
	}

	queues := map[string]persistence.QueueMetrics{}
	for _, q := range snap.Queues {
		queues[q.Name.Name] = q
	}
	if len(queues) != 3 {
		t.Fatalf("queues %+v, want q1, q2 and idle", snap.Queues)
	}
	if q := queues["q1"]; q.Pending != 5 || q.OldestPendingSeconds < 3600 || q.OldestPendingSeconds > 3600+300 || q.DeadLetters != 0 {
		t.Errorf("q1 %+v, want 5 pending (a3..a5, b2, b3) an hour old, no dead letter", q)
	}
	if q := queues["q2"]; q.Pending != 1 || q.DeadLetters != 1 || q.OldestPendingSeconds > 300 {
		t.Errorf("q2 %+v, want 1 pending (c2) and 1 dead letter", q)
	}
	if q := queues["idle"]; q.Pending != 0 || q.OldestPendingSeconds != 0 || q.DeadLetters != 0 {
		t.Errorf("idle %+v, want nothing pending", q)
	}

	groups := map[string]persistence.GroupMetrics{}
	for _, g := range snap.Groups {
		groups[g.Group+"/"+g.Queue.Name] = g
	}
	if len(groups) != 2 {
		t.Fatalf("groups %+v, want g/q1 and h/q2 (queue mode is not a group)", snap.Groups)
	}
	if g := groups["g/q1"]; g.Lag != 4 || g.LagSeconds < 7200 || g.LagSeconds > 7200+300 {
		t.Errorf("g/q1 %+v, want 4 behind (a2..a5), the oldest two hours old", g)
	}
	if g := groups["h/q2"]; g.Lag != 0 || g.LagSeconds != 0 {
		t.Errorf("h/q2 %+v, want caught up", g)
	}
}

// Every failed transaction attempt reaches the OnError listener.
func TestStoreReportsDatabaseErrors(t *testing.T) {
	e := newStoreEnv(t)
	var n int
	e.s.OnError(func() { n++ })
	if _, err := e.s.Configure(e.ctx, persistence.ConfigureRequest{Queue: persistence.QueueName{Name: strings.Repeat("q", 300)}}); err == nil {
		t.Fatal("a 300-character queue name was stored")
	}
	if n != 1 {
		t.Fatalf("OnError called %d times for one failed transaction, want 1", n)
	}
	e.push(items("ok", "p", "c", "x")...)
	if n != 1 {
		t.Fatalf("OnError called for a push that succeeded (%d calls)", n)
	}
	// A transaction rolled back because one of its operations failed is not a database error.
	ack := persistence.AckItem{PartitionID: uuid.New(), TransactionID: "nope", Group: persistence.QueueMode, Status: persistence.AckCompleted}
	if _, reason, err := e.s.Transaction(e.ctx, []persistence.TxOp{{Ack: &ack}}); err != nil || reason == "" {
		t.Fatalf("transaction acking a missing message: reason %q, err %v", reason, err)
	}
	if n != 1 {
		t.Fatalf("OnError called for a transaction rolled back on purpose (%d calls)", n)
	}
}

// The backlog reads look a partition's segments up only when it has messages after the
// cursor: the metrics read runs every few seconds over every partition, and most partitions of
// a large queue are caught up.
func TestBacklogReadsSkipCaughtUpPartitions(t *testing.T) {
	e := newStoreEnv(t)
	e.fillPartitions("q", 200, 2)
	e.exec(`INSERT INTO queen.partition_consumers (partition_id, consumer_group, cursor_seq)
		SELECT id, g, last_seq FROM queen.partitions, unnest(ARRAY['` + persistence.QueueMode + `', 'g']) g`)
	e.push(items("q", "p0000", "late", "late")...) // the one partition with a backlog
	for name, sql := range map[string]string{"queue": persistence.QueueBacklogSQL, "group": persistence.GroupBacklogSQL} {
		lookups := 0
		walkPlan(explainPlan(t, e, e.pool, sql, nil).Plan, func(n planNode) {
			if n.Relation == "segments" {
				lookups += int(n.Loops)
			}
		})
		// The one partition: its first segment after the cursor, at most once per step.
		if lookups > 2 {
			t.Errorf("the %s backlog read looked segments up %d times for 1 partition with a backlog among 200", name, lookups)
		}
	}
	snap, err := e.s.ReadMetrics(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Queues) != 1 || snap.Queues[0].Pending != 1 {
		t.Errorf("queue backlogs %+v, want q with 1 pending", snap.Queues)
	}
	if len(snap.Groups) != 1 || snap.Groups[0].Lag != 1 {
		t.Errorf("group backlogs %+v, want g with a lag of 1", snap.Groups)
	}
}

// The broker's sessions never JIT-compile: the backlog read, the costliest statement it runs
// periodically, spent a third of its time compiling at 100,000 partitions. A session of the
// test's own pool, with JIT on by default, is the control.
func TestBrokerSessionsDoNotCompile(t *testing.T) {
	e := newStoreEnv(t)
	e.fillPartitions("q", 10, 1)
	const always = "SET LOCAL jit_above_cost = 0"
	if explainPlan(t, e, e.pool, persistence.QueueBacklogSQL, nil, always).JIT == nil {
		t.Skip("this PostgreSQL does not JIT-compile (built without LLVM, or jit off in its configuration)")
	}
	conn := e.prepareOnBrokerConn("backlog", persistence.QueueBacklogSQL)
	if jit := explainPlan(t, e, conn, "EXECUTE backlog", nil, always).JIT; jit != nil {
		t.Errorf("a broker session JIT-compiled the backlog read: %s", jit)
	}
}

package persistence_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"queen/persistence"
)

// fillPartitions pushes perPartition messages to each of n partitions of queue, message k of
// partition i with transactionId "pI/k" (k from 1).
func (e *storeEnv) fillPartitions(queue string, n, perPartition int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("p%04d", i)
	}
	for k := 1; k <= perPartition; k++ {
		var batch []persistence.PushItem
		for _, name := range names {
			batch = append(batch, items(queue, name, "fill", fmt.Sprintf("%s/%d", name, k))...)
		}
		e.push(batch...)
	}
	return names
}

// popper pops a queue the way one broker does: each wildcard pop starts where the previous
// one returned (the queue actor keeps that position).
type popper struct {
	e      *storeEnv
	mu     sync.Mutex
	resume persistence.RingPosition
}

func (p *popper) pop(r persistence.PopRequest) (persistence.PopResult, string) {
	p.mu.Lock()
	r.Resume = p.resume
	p.mu.Unlock()
	res, lease := p.e.pop(r)
	p.mu.Lock()
	p.resume = res.Resume
	p.mu.Unlock()
	return res, lease
}

// Wildcard pops of one message go round every partition with data before any partition gets a
// second turn, at 2000 partitions: each round delivers the next message of every partition,
// once. In queue mode a partition delivered and not yet acknowledged is skipped, so the pop
// after a round of unacknowledged deliveries finds nothing; with autoAck the rounds follow
// each other.
func TestPopGoesRoundEveryPartition(t *testing.T) {
	const partitions, perPartition = 2000, 2
	for _, autoAck := range []bool{false, true} {
		t.Run(fmt.Sprintf("autoAck %v", autoAck), func(t *testing.T) {
			e := newStoreEnv(t)
			names := e.fillPartitions("q", partitions, perPartition)
			group := persistence.QueueMode
			if autoAck {
				group = "g"
			}
			p := &popper{e: e}
			for round := 1; round <= perPartition; round++ {
				var got []string
				var acks []persistence.AckItem
				for range partitions {
					res, lease := p.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Group: group, Batch: 1, AutoAck: autoAck})
					if len(res.Messages) != 1 {
						t.Fatalf("round %d, pop %d: %q with %d messages", round, len(got)+1, res.Outcome, len(res.Messages))
					}
					m := res.Messages[0]
					if want := fmt.Sprintf("%s/%d", m.Partition.Name, round); m.TransactionID != want {
						t.Fatalf("round %d delivered %s, want %s: a partition got a second turn, or its order broke", round, m.TransactionID, want)
					}
					got = append(got, m.Partition.Name)
					if !autoAck {
						acks = append(acks, ackOf(m, group, lease, persistence.AckCompleted))
					}
				}
				slices.Sort(got)
				if !slices.Equal(got, names) {
					t.Fatalf("round %d did not deliver every partition once", round)
				}
				if !autoAck {
					if res, _ := p.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Batch: 1}); res.Outcome != persistence.PopNoPartition {
						t.Fatalf("with every partition leased, a pop answered %q with %d messages", res.Outcome, len(res.Messages))
					}
					for _, r := range e.ack(acks...) {
						if !r.Success {
							t.Fatalf("ack: %+v", r)
						}
					}
				}
			}
			if res, _ := p.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Group: group, Batch: 1, AutoAck: autoAck}); res.Outcome != persistence.PopNoPartition {
				t.Errorf("after every message, a pop answered %q with %d messages", res.Outcome, len(res.Messages))
			}
		})
	}
}

// Concurrent consumers sharing one position, as a broker's consumers of a queue do, each pop
// claiming up to 3 partitions: every message is delivered once, in order within its
// partition, and no two pops hold a partition at the same time (an ack under a lease another
// pop took over would fail).
func TestConcurrentPopsAtManyPartitions(t *testing.T) {
	const partitions, perPartition, consumers = 300, 4, 8
	e := newStoreEnv(t)
	e.fillPartitions("q", partitions, perPartition)
	p := &popper{e: e}
	var mu sync.Mutex
	delivered := map[string][]string{} // by partition, in delivery order
	var wg sync.WaitGroup
	for range consumers {
		wg.Go(func() {
			for {
				res, lease := p.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Batch: 5, Partitions: 3})
				if res.Outcome == persistence.PopNoPartition {
					return
				}
				var acks []persistence.AckItem
				mu.Lock()
				for _, m := range res.Messages {
					delivered[m.Partition.Name] = append(delivered[m.Partition.Name], m.TransactionID)
					acks = append(acks, ackOf(m, persistence.QueueMode, lease, persistence.AckCompleted))
				}
				mu.Unlock()
				res2, err := e.s.Ack(e.ctx, acks)
				if err != nil {
					t.Errorf("ack: %v", err)
					return
				}
				for _, r := range res2 {
					if !r.Success {
						t.Errorf("ack: %+v", r)
					}
				}
			}
		})
	}
	wg.Wait()
	if len(delivered) != partitions {
		t.Fatalf("%d partitions delivered, want %d", len(delivered), partitions)
	}
	for name, got := range delivered {
		var want []string
		for k := 1; k <= perPartition; k++ {
			want = append(want, fmt.Sprintf("%s/%d", name, k))
		}
		if !slices.Equal(got, want) {
			t.Errorf("partition %s delivered %v, want %v", name, got, want)
		}
	}
}

// A wildcard pop tells how far its search went as soon as it has locked the partitions it is
// about to claim, before it claims them: a pop of the same group started from there while the
// first still runs takes the next partitions, without reading or losing the first's.
func TestPopReportsHowFarItSearchedBeforeItClaims(t *testing.T) {
	e := newStoreEnv(t)
	e.fillPartitions("q", 10, 2)
	req := persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Group: persistence.QueueMode, Batch: 6, Partitions: 3}
	var reports []string
	var second persistence.PopResult
	first := req
	first.LeaseID = uuid.New()
	first.Searched = func(pos persistence.RingPosition) {
		reports = append(reports, pos.Partition)
		if len(reports) > 1 {
			return
		}
		r := req
		r.LeaseID, r.Resume = uuid.New(), pos
		var err error
		if second, err = e.s.Pop(e.ctx, r); err != nil {
			t.Errorf("the pop started from the report: %v", err)
		}
	}
	res, err := e.s.Pop(e.ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(reports, []string{"p0002"}) {
		t.Errorf("the first pop reported %v, want [p0002]: the last partition it claims", reports)
	}
	want := func(parts ...string) (ids []string) {
		for _, p := range parts {
			ids = append(ids, p+"/1", p+"/2")
		}
		return ids
	}
	if got := txIDs(res.Messages); !slices.Equal(got, want("p0000", "p0001", "p0002")) {
		t.Errorf("the first pop delivered %v", got)
	}
	if got := txIDs(second.Messages); !slices.Equal(got, want("p0003", "p0004", "p0005")) {
		t.Errorf("the pop started from the report delivered %v", got)
	}
}

// A pop's first step reads a stretch of the ring sized to the partitions it wants, eight
// for each, up to a chunk: a pop that wants one partition of a queue whose partitions
// mostly have data finds one among the first few, and read 32 cursors for it before. Where
// the partitions ahead are empty, the report after the first step names the last it read.
func TestFirstStepReadsWhatThePopWants(t *testing.T) {
	for _, c := range []struct {
		want  int
		first string
	}{{1, "p0007"}, {3, "p0023"}, {10, "p0031"}} {
		e := newStoreEnv(t)
		e.fillPartitions("q", 100, 1)
		drain, _ := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Batch: 99, Partitions: 99, AutoAck: true})
		if n := len(drain.Messages); n != 99 {
			t.Fatalf("the drain took %d messages, want 99", n)
		}
		var reports []string
		res, _ := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Batch: 1, Partitions: c.want,
			Searched: func(pos persistence.RingPosition) { reports = append(reports, pos.Partition) }})
		if ids := txIDs(res.Messages); !slices.Equal(ids, []string{"p0099/1"}) {
			t.Fatalf("want %d: the pop delivered %v, want [p0099/1]", c.want, ids)
		}
		if len(reports) == 0 || reports[0] != c.first {
			t.Errorf("want %d: the pop reported %v; the first step should have read up to %s", c.want, reports, c.first)
		}
	}
}

// A wildcard pop does not wait for a partition's row that another transaction holds (an ack
// locks the rows of its batch while it works): it claims the next partition instead. A pop that
// waited would hold the rows it had claimed meanwhile, and an ack waiting for one of those
// while holding the row the pop wants is a deadlock that PostgreSQL breaks only after a second.
func TestWildcardPopSkipsARowAnotherTransactionHolds(t *testing.T) {
	e := newStoreEnv(t)
	e.fillPartitions("q", 2, 1)
	// Both partitions read before: their cursor rows exist, unleased.
	e.exec(`INSERT INTO queen.partition_consumers (partition_id, consumer_group)
		SELECT id, '__QUEUE_MODE__' FROM queen.partitions`)
	ack, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ack.Rollback(e.ctx)
	if _, err := ack.Exec(e.ctx, `SELECT 1 FROM queen.partition_consumers pc JOIN queen.partitions p ON p.id = pc.partition_id
		WHERE p.name = 'p0000' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	done := e.popInBackground(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Group: persistence.QueueMode,
		Batch: 1, Partitions: 1, LeaseID: uuid.New()})
	got := awaitNoLockWait(e, done)
	if got.err != nil {
		t.Fatal(got.err)
	}
	if ids := txIDs(got.res.Messages); len(ids) != 1 || ids[0] != "p0001/1" {
		t.Fatalf("the pop delivered %v, want p0001/1", txIDs(got.res.Messages))
	}
	if err := ack.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	res, _ := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Batch: 1, Resume: got.res.Resume})
	if ids := txIDs(res.Messages); len(ids) != 1 || ids[0] != "p0000/1" {
		t.Fatalf("once the row was free the pop delivered %v, want p0000/1", ids)
	}
}

// A position taken on a queue that was deleted and created again under the same name names
// the old queue's id: the pop finds the new queue anyway.
func TestPopResumesOnAQueueCreatedAgain(t *testing.T) {
	e := newStoreEnv(t)
	e.push(items("q", "p", "1", "a")...)
	p := &popper{e: e}
	if res, _ := p.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Batch: 1, AutoAck: true}); len(res.Messages) != 1 {
		t.Fatalf("first pop: %+v", res)
	}
	old := p.resume
	if old.Queue == uuid.Nil || !old.Claimed || old.Partition != "p" {
		t.Fatalf("position after claiming p: %+v", old)
	}
	if _, err := e.s.DeleteQueue(e.ctx, persistence.QueueName{Name: "q"}); err != nil {
		t.Fatal(err)
	}
	e.push(items("q", "p", "2", "b")...)
	res, _ := p.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Batch: 1, AutoAck: true})
	if !slices.Equal(txIDs(res.Messages), []string{"b"}) {
		t.Fatalf("pop with the old queue's position delivered %v (%q), want [b]", txIDs(res.Messages), res.Outcome)
	}
	if p.resume.Queue == old.Queue {
		t.Errorf("the position still names the deleted queue %s", old.Queue)
	}
}

// A step of the search reads one chunk of the queue's partitions in name order, not the
// queue: PostgreSQL must walk the (queue_id, name) index from the position and look up the
// group's cursor of the partitions read, whatever it knows of the table. The step is prepared
// here while the queue has one partition, then counted on 2000 partitions, every one with
// data, without statistics (a queue that has just grown) and with.
func TestPopSearchReadsAChunk(t *testing.T) {
	const partitions, chunk = 2000, 32
	e := newStoreEnv(t)
	e.push(items("q", "p0000", "fill", "first")...)
	res, _ := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Batch: 1, AutoAck: true})
	queueID := res.Resume.Queue
	settings, sql, args := persistence.RingStep(queueID, persistence.QueueName{Name: "q"}, persistence.QueueMode, "p1000", chunk, 1)
	conn := e.prepareOnBrokerConn("step", sql)
	execute := "EXECUTE step(" + sqlLiterals(args) + ")"
	explainReads(t, e, conn, execute, nil, settings) // makes the plan

	e.fillPartitions("q", partitions, 1)
	// Every partition read before by queue mode and two groups: the cursors outnumber the
	// partitions, as they do in a broker that has run a while.
	e.exec(`INSERT INTO queen.partition_consumers (partition_id, consumer_group)
		SELECT p.id, g FROM queen.partitions p, unnest(ARRAY['__QUEUE_MODE__', 'g1', 'g2']) g
		ON CONFLICT DO NOTHING`)
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			e.exec(`ANALYZE queen.partitions`)
			e.exec(`ANALYZE queen.partition_consumers`)
		}
		read := explainReads(t, e, conn, execute, nil, settings)
		if read["partitions"] > 2*chunk || read["partition_consumers"] > chunk {
			t.Errorf("analyzed %v: a step read %d partitions and %d cursors; want at most %d and %d",
				analyzed, read["partitions"], read["partition_consumers"], 2*chunk, chunk)
		}
	}
}

// sqlLiterals writes args as the literals of an EXECUTE's argument list.
func sqlLiterals(args []any) string {
	out := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case *string:
			if v == nil {
				out[i] = "NULL"
			} else {
				out[i] = "'" + strings.ReplaceAll(*v, "'", "''") + "'"
			}
		case string:
			out[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		case [16]byte:
			out[i] = "'" + uuid.UUID(v).String() + "'"
		default:
			out[i] = fmt.Sprint(v)
		}
	}
	return strings.Join(out, ", ")
}

// explainReads runs settings, then sql under EXPLAIN ANALYZE, in a transaction of db it rolls
// back, and returns the rows each table's scans read, over all their loops: the rows they
// returned and those their filters removed.
func explainReads(t *testing.T, e *storeEnv, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, sql string, args []any, settings ...string) map[string]int {
	t.Helper()
	read := map[string]int{}
	walkPlan(explainPlan(t, e, db, sql, args, settings...).Plan, func(n planNode) {
		if n.Relation != "" && n.Node != "ModifyTable" { // scans only: not the rows written
			read[n.Relation] += int((n.Rows + n.Filtered) * n.Loops)
		}
	})
	return read
}

// walkPlan calls visit on n and every node under it.
func walkPlan(n planNode, visit func(planNode)) {
	visit(n)
	for _, c := range n.Plans {
		walkPlan(c, visit)
	}
}

// explained is what EXPLAIN (ANALYZE, FORMAT JSON) tells of one statement: its plan, and its
// JIT compilation when PostgreSQL compiled it (nil otherwise).
type explained struct {
	Plan planNode        `json:"Plan"`
	JIT  json.RawMessage `json:"JIT"`
}

// explainPlan is sql as EXPLAIN ANALYZE ran it, after settings, in a transaction of db it rolls
// back.
func explainPlan(t *testing.T, e *storeEnv, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, sql string, args []any, settings ...string) explained {
	t.Helper()
	tx, err := db.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(e.ctx)
	for _, set := range settings {
		if _, err := tx.Exec(e.ctx, set); err != nil {
			t.Fatal(err)
		}
	}
	var plan []explained
	if err := tx.QueryRow(e.ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	return plan[0]
}

type planNode struct {
	Node     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Rows     float64    `json:"Actual Rows"`
	Filtered float64    `json:"Rows Removed by Filter"`
	Loops    float64    `json:"Actual Loops"`
	Plans    []planNode `json:"Plans"`
}

// A pop whose batch needs many shallow partitions claims them together and spends the batch
// exactly: twelve partitions of nine messages and a batch of 100 deliver the first eleven whole
// and the first message of the twelfth, in order, each partition leased up to what it
// delivered. Once they are acknowledged, the next pop brings the rest of the twelfth.
func TestPopSpreadsItsBatchOverShallowPartitions(t *testing.T) {
	e := newStoreEnv(t)
	names := e.fillPartitions("q", 12, 9)
	p := &popper{e: e}
	req := persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Batch: 100, Partitions: 20}
	first, lease := p.pop(req)
	var want []string
	for i, name := range names {
		for k := 1; k <= 9 && (i < 11 || k == 1); k++ {
			want = append(want, fmt.Sprintf("%s/%d", name, k))
		}
	}
	var got []string
	var acks []persistence.AckItem
	for _, m := range first.Messages {
		got = append(got, m.TransactionID)
		acks = append(acks, ackOf(m, persistence.QueueMode, lease, persistence.AckCompleted))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("first pop delivered %v, want %v", got, want)
	}
	if len(first.Partitions) != 12 {
		t.Fatalf("first pop claimed %d partitions, want 12", len(first.Partitions))
	}
	for i, part := range first.Partitions {
		end := int64(9)
		if i == 11 {
			end = 1
		}
		e.checkConsumer(part.ID, persistence.QueueMode, lease, consumerRow{LeaseID: lease, LeaseEnd: end})
	}
	if _, err := e.s.Ack(e.ctx, acks); err != nil {
		t.Fatal(err)
	}
	second, _ := p.pop(req)
	got = nil
	for _, m := range second.Messages {
		got = append(got, m.TransactionID)
	}
	want = want[:0]
	for k := 2; k <= 9; k++ {
		want = append(want, fmt.Sprintf("%s/%d", names[11], k))
	}
	if !slices.Equal(got, want) {
		t.Errorf("second pop delivered %v, want %v", got, want)
	}
}

// The claims of a wildcard pop run on generic plans, made once per connection and kept, maybe
// while the tables hold next to nothing. A plan made on a queue of one message must still read
// the group's row and the partition's next messages by index once the partition holds
// thousands of messages among thousands of partitions and cursors.
func TestClaimPlansMadeOnEmptyTablesReadByIndex(t *testing.T) {
	const limit = 10
	for _, idle := range []bool{false, true} {
		t.Run(fmt.Sprintf("row exists %v", idle), func(t *testing.T) {
			e := newStoreEnv(t)
			pid := e.push(items("q", "p", "fill", "m1")...)[0].PartitionID
			if idle {
				e.exec(`INSERT INTO queen.partition_consumers (partition_id, consumer_group) VALUES ($1, $2)`, pid, persistence.QueueMode)
			}
			settings, sql := persistence.WildcardClaim(idle)
			conn := e.prepareOnBrokerConn("claim", sql)
			// $3 is the cursor of a new row, or the last_seq the search saw.
			execute := func(cursor int64) string {
				return fmt.Sprintf("EXECUTE claim('%s', '%s', %d, '%s', 60, %d, 0)", pid, persistence.QueueMode, cursor, uuid.New(), limit)
			}
			explainReads(t, e, conn, execute(0), nil, settings...) // makes the plan

			e.insertMessages(`SELECT $1::uuid, s::int8, 'm' || s FROM generate_series(2, 5000) s`, pid)
			e.exec(`INSERT INTO queen.partitions (queue_id, name) SELECT queue_id, 'x' || g FROM queen.partitions, generate_series(1, 2000) g`)
			e.insertMessages(`SELECT p.id, s::int8, 'm' || s FROM queen.partitions p, generate_series(1, 3) s WHERE p.name LIKE 'x%'`)
			e.exec(`INSERT INTO queen.partition_consumers (partition_id, consumer_group)
				SELECT p.id, g FROM queen.partitions p, unnest(ARRAY['__QUEUE_MODE__', 'g1', 'g2']) g WHERE p.name LIKE 'x%'`)

			cursor := int64(100)
			if idle {
				cursor = 5000 // the last_seq the search saw; the row's cursor is 0
			}
			read := explainReads(t, e, conn, execute(cursor), nil, settings...)
			// The group's row is read once to lock it and once to update it.
			// Each message is a segment of its own here; the sort of a segment's messages may
			// read the segment after the last it needs.
			if read["segments"] < limit || read["segments"] > limit+1 || read["partition_consumers"] > 2 {
				t.Errorf("a claim of %d messages read %d segments and %d cursors; want %d or %d and at most 2",
					limit, read["segments"], read["partition_consumers"], limit, limit+1)
			}
		})
	}
}

// The statement that claims several partitions at once runs on a generic plan too: made while
// the queue held two messages, it must still probe each candidate's cursor by its key and read
// each partition's window from the segment index once the partitions hold thousands of
// messages among thousands of partitions and cursors, one candidate with a cursor row and one
// without.
func TestClaimOfManyPlanMadeOnEmptyTablesReadsByIndex(t *testing.T) {
	const limit = 10
	e := newStoreEnv(t)
	idle := e.push(items("q", "idle", "fill", "i1")...)[0].PartitionID
	fresh := e.push(items("q", "fresh", "fill", "f1")...)[0].PartitionID
	e.exec(`INSERT INTO queen.partition_consumers (partition_id, consumer_group) VALUES ($1, $2)`, idle, persistence.QueueMode)
	settings, sql := persistence.WildcardClaims()
	conn := e.prepareOnBrokerConn("claims", sql)
	// The idle partition's seed is the last_seq the search saw, the fresh one's the cursor its
	// new row starts at.
	execute := func(idleSeen, freshStart int64) string {
		return fmt.Sprintf("EXECUTE claims(ARRAY['%s', '%s']::uuid[], ARRAY['%s', '%s'], ARRAY[%d, %d]::int8[], ARRAY[true, false], ARRAY[%d, %d], '%s', 60, 0)",
			idle, fresh, persistence.QueueMode, persistence.QueueMode, idleSeen, freshStart, limit, limit, uuid.New())
	}
	explainReads(t, e, conn, execute(1, 0), nil, settings...) // makes the plan

	e.insertMessages(`SELECT p, s::int8, 'm' || s FROM unnest(ARRAY[$1::uuid, $2::uuid]) p, generate_series(2, 5000) s`, idle, fresh)
	e.exec(`INSERT INTO queen.partitions (queue_id, name) SELECT p.queue_id, 'x' || g FROM queen.partitions p, generate_series(1, 2000) g WHERE p.name = 'idle'`)
	e.insertMessages(`SELECT p.id, s::int8, 'm' || s FROM queen.partitions p, generate_series(1, 3) s WHERE p.name LIKE 'x%'`)
	e.exec(`INSERT INTO queen.partition_consumers (partition_id, consumer_group)
		SELECT p.id, g FROM queen.partitions p, unnest(ARRAY['__QUEUE_MODE__', 'g1', 'g2']) g WHERE p.name LIKE 'x%'`)

	read := explainReads(t, e, conn, execute(5000, 100), nil, settings...)
	// Each claim reads its window (each message a segment of its own here, and the sort of a
	// segment's messages may read the one after) and the idle row is read to lock it and to
	// update it.
	if read["segments"] < 2*limit || read["segments"] > 2*(limit+1) || read["partition_consumers"] > 2 {
		t.Errorf("two claims of %d messages read %d segments and %d cursors; want %d to %d and at most 2",
			limit, read["segments"], read["partition_consumers"], 2*limit, 2*(limit+1))
	}
}

// A wildcard claim sets where its lease ends as if every message after the cursor were there
// and commits with it; when messages of the window are gone, the pop corrects the lease's end to
// the last message it delivered, so that acknowledging what it delivered releases the lease
// and the next pop goes on after it.
func TestWildcardPopLeaseEndsAtItsLastMessage(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deleted  []string // deleted before the pop
		first    []string // the pop of 3
		leaseEnd int64
		next     []string // the pop after the acks
	}{
		{name: "a full window", first: []string{"a", "b", "c"}, leaseEnd: 4, next: []string{"d", "e"}},
		{name: "its last message deleted", deleted: []string{"c"}, first: []string{"a", "b"}, leaseEnd: 3, next: []string{"d", "e"}},
		{name: "a message inside deleted", deleted: []string{"b"}, first: []string{"a", "c"}, leaseEnd: 4, next: []string{"d", "e"}},
		{name: "the partition's last message deleted", deleted: []string{"e"}, first: []string{"a", "b", "c"}, leaseEnd: 4, next: []string{"d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newStoreEnv(t)
			// The group has read the partition before: its cursor row exists, as for most
			// pops, and the claim sets the lease's end (a first claim creates the row and
			// leaves that to the pop's bookkeeping).
			pid := e.push(items("q", "p", "0", "0")...)[0].PartitionID
			res, lease := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Batch: 1})
			e.ack(ackOf(res.Messages[0], persistence.QueueMode, lease, persistence.AckCompleted))
			e.push(items("q", "p", "1", "a", "b", "c", "d", "e")...)
			for _, tx := range tc.deleted {
				if ok, err := e.s.DeleteMessage(e.ctx, pid, tx); err != nil || !ok {
					t.Fatalf("delete %s: %v, %v", tx, ok, err)
				}
			}
			q := persistence.QueueName{Name: "q"}
			res, lease = e.pop(persistence.PopRequest{Queue: q, Batch: 3})
			if got := txIDs(res.Messages); !slices.Equal(got, tc.first) {
				t.Fatalf("pop delivered %v, want %v", got, tc.first)
			}
			e.checkConsumer(pid, persistence.QueueMode, lease, consumerRow{Cursor: 1, LeaseID: ownLease, LeaseEnd: tc.leaseEnd, Consumed: 1, Batches: 1})
			var acks []persistence.AckItem
			for _, m := range res.Messages {
				acks = append(acks, ackOf(m, persistence.QueueMode, lease, persistence.AckCompleted))
			}
			if r := e.ack(acks...); !r[len(r)-1].LeaseReleased {
				t.Errorf("the acks did not release the lease: %+v", r)
			}
			if got := e.consumer(pid, persistence.QueueMode); got.LeaseID != "" {
				t.Errorf("lease %s still held after the acks", got.LeaseID)
			}
			next, _ := e.pop(persistence.PopRequest{Queue: q, Batch: 10})
			if got := txIDs(next.Messages); !slices.Equal(got, tc.next) {
				t.Errorf("next pop delivered %v, want %v", got, tc.next)
			}
		})
	}
}

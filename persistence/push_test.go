package persistence_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"queen/persistence"
)

// Push numbers each partition's messages in call order, and answers a transactionId already
// stored in the same partition (by an earlier call or earlier in the same call) as a duplicate
// carrying the original message's id, without storing it again.
func TestPushSequenceAndDuplicates(t *testing.T) {
	type call []persistence.PushItem
	cases := []struct {
		name  string
		calls []call
		// want lists, per call, the status of each item, and per partition the transactionIds
		// stored, in sequence order.
		want   [][]persistence.PushStatus
		stored map[string][]string
	}{
		{
			name:   "one call numbers in call order",
			calls:  []call{items("q", "p", "1", "c", "a", "b")},
			want:   [][]persistence.PushStatus{{"queued", "queued", "queued"}},
			stored: map[string][]string{"p": {"c", "a", "b"}},
		},
		{
			name:   "a later call appends after the head",
			calls:  []call{items("q", "p", "1", "a", "b"), items("q", "p", "2", "c")},
			want:   [][]persistence.PushStatus{{"queued", "queued"}, {"queued"}},
			stored: map[string][]string{"p": {"a", "b", "c"}},
		},
		{
			name: "partitions interleaved in one call",
			calls: []call{slices.Concat(items("q", "p1", "1", "a"), items("q", "p2", "1", "b"),
				items("q", "p1", "1", "c"), items("q", "p2", "1", "d"))},
			want:   [][]persistence.PushStatus{{"queued", "queued", "queued", "queued"}},
			stored: map[string][]string{"p1": {"a", "c"}, "p2": {"b", "d"}},
		},
		{
			name:   "duplicate of an earlier call",
			calls:  []call{items("q", "p", "1", "a"), items("q", "p", "2", "b", "a")},
			want:   [][]persistence.PushStatus{{"queued"}, {"queued", "duplicate"}},
			stored: map[string][]string{"p": {"a", "b"}},
		},
		{
			name:   "duplicate within one call",
			calls:  []call{items("q", "p", "1", "a", "a", "b", "a")},
			want:   [][]persistence.PushStatus{{"queued", "duplicate", "queued", "duplicate"}},
			stored: map[string][]string{"p": {"a", "b"}},
		},
		{
			name:   "only duplicates",
			calls:  []call{items("q", "p", "1", "a"), items("q", "p", "2", "a", "a")},
			want:   [][]persistence.PushStatus{{"queued"}, {"duplicate", "duplicate"}},
			stored: map[string][]string{"p": {"a"}},
		},
		{
			name:   "same transactionId in another partition",
			calls:  []call{items("q", "p1", "1", "a"), slices.Concat(items("q", "p2", "2", "a"), items("q", "p1", "2", "a"))},
			want:   [][]persistence.PushStatus{{"queued"}, {"queued", "duplicate"}},
			stored: map[string][]string{"p1": {"a"}, "p2": {"a"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newStoreEnv(t)
			// A stored transactionId is refused by the unique index and the push run again
			// with the lookup: not a database error.
			var dbErrors int
			e.s.OnError(func() { dbErrors++ })
			t.Cleanup(func() {
				if dbErrors > 0 {
					t.Errorf("%d database errors counted", dbErrors)
				}
			})
			// The first id and call each (partition, transactionId) was queued with.
			type key struct {
				partition uuid.UUID
				tx        string
			}
			type origin struct {
				id   uuid.UUID
				call string
			}
			first := map[key]origin{}
			parts := map[string]uuid.UUID{}
			for c, items := range tc.calls {
				res := e.push(items...)
				for i, r := range res {
					it := items[i]
					if r.Status != tc.want[c][i] {
						t.Errorf("call %d item %d (%s/%s): status %q, want %q", c+1, i, it.Partition, it.TransactionID, r.Status, tc.want[c][i])
					}
					if pid, ok := parts[it.Partition]; ok && pid != r.PartitionID {
						t.Errorf("partition %s answered as %s and %s", it.Partition, pid, r.PartitionID)
					}
					parts[it.Partition] = r.PartitionID
					k := key{r.PartitionID, it.TransactionID}
					if o, ok := first[k]; !ok {
						first[k] = origin{r.MessageID, fmt.Sprint(c + 1)}
					} else if r.MessageID != o.id {
						t.Errorf("call %d item %d: duplicate answers id %s, want the original %s", c+1, i, r.MessageID, o.id)
					}
				}
			}
			for name, want := range tc.stored {
				pid := parts[name]
				got := e.stored(pid)
				var gotTx []string
				for i, m := range got {
					gotTx = append(gotTx, m.TxID)
					o := first[key{pid, m.TxID}]
					if m.Seq != int64(i+1) || m.ID != o.id {
						t.Errorf("partition %s row %d: seq %d id %s, want seq %d id %s", name, i, m.Seq, m.ID, i+1, o.id)
					}
					// The original payload stays: a duplicate never overwrites it.
					if !jsonEqual(m.Payload, string(payloadOf(m.TxID, o.call))) {
						t.Errorf("partition %s %s: payload %s, want the one of call %s", name, m.TxID, m.Payload, o.call)
					}
				}
				if !slices.Equal(gotTx, want) {
					t.Errorf("partition %s stores %v, want %v", name, gotTx, want)
				}
				if head := e.count(`SELECT last_seq FROM queen.partitions WHERE id = $1`, pid); head != len(want) {
					t.Errorf("partition %s: last_seq %d, want %d", name, head, len(want))
				}
			}
		})
	}
}

func jsonEqual(a, b string) bool {
	var va, vb any
	if json.Unmarshal([]byte(a), &va) != nil || json.Unmarshal([]byte(b), &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// The first push to a queue creates it, with namespace and task taken from its name, and its
// partition; later pushes reuse both.
func TestPushCreatesQueueAndPartition(t *testing.T) {
	e := newStoreEnv(t)
	first := e.push(items("billing.invoices.eu", "north", "1", "a")...)
	second := e.push(items("billing.invoices.eu", "north", "2", "b")...)
	if first[0].PartitionID != second[0].PartitionID {
		t.Errorf("second push answered partition %s, the first %s", second[0].PartitionID, first[0].PartitionID)
	}
	type queueRow struct {
		Namespace, Task, Partition string
		Head                       int64
		HasLastMessage             bool
	}
	got := collect[queueRow](e, `SELECT q.namespace, q.task, p.name, p.last_seq, p.last_message_at IS NOT NULL
		FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id
		WHERE q.name = 'billing.invoices.eu' AND p.id = $1`, first[0].PartitionID)
	want := []queueRow{{"billing", "invoices", "north", 2, true}}
	if !slices.Equal(got, want) {
		t.Errorf("queue and partition rows %+v, want %+v", got, want)
	}
	if n := e.count(`SELECT count(*) FROM queen.partitions`); n != 1 {
		t.Errorf("%d partitions, want 1", n)
	}
}

// sealer marks a payload as sealed; enough to tell a sealed payload from a clear one.
type sealer struct{}

func (sealer) Seal(p []byte, _, _ string) (json.RawMessage, error) {
	return json.Marshal(map[string]string{"sealed": string(p)})
}

// A queue flagged encryption_enabled never stores a clear payload: without a sealer the item
// fails (and only that item), with one it is sealed; an item the caller sealed already passes.
func TestPushToEncryptedQueue(t *testing.T) {
	clear := json.RawMessage(`{"card":"4111"}`)
	sealed, _ := sealer{}.Seal(clear, "vault", "secret")
	cases := []struct {
		name       string
		sealer     persistence.PayloadSealer
		preSealed  bool
		wantStatus persistence.PushStatus
		wantError  string
		wantStored string // "" when nothing is stored
	}{
		{"no sealer refuses", nil, false, persistence.StatusFailed, persistence.EncryptionRequired(persistence.QueueName{Name: "vault"}), ""},
		{"no sealer takes a sealed item", nil, true, persistence.StatusQueued, "", string(sealed)},
		{"sealer seals", sealer{}, false, persistence.StatusQueued, "", string(sealed)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newStoreEnv(t)
			e.encryptQueue("vault")
			e.s.SetSealer(tc.sealer)
			it := persistence.PushItem{Queue: persistence.QueueName{Name: "vault"}, Partition: "p", TransactionID: "secret", Payload: clear, Encrypted: tc.preSealed}
			if tc.preSealed {
				it.Payload = sealed
			}
			// A clear queue in the same call is not affected.
			res := e.push(it, items("open", "p", "1", "plain")[0])
			if r := res[0]; r.Status != tc.wantStatus || r.Error != tc.wantError {
				t.Errorf("encrypted item: %+v, want status %q error %q", r, tc.wantStatus, tc.wantError)
			}
			if r := res[1]; r.Status != persistence.StatusQueued {
				t.Errorf("clear item fused with it: %+v", r)
			}
			type row struct {
				Payload   string
				Encrypted bool
			}
			got := collect[row](e, `SELECT m.payload::text, m.is_encrypted FROM queen.messages m
				JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
				WHERE q.name = 'vault'`)
			switch {
			case tc.wantStored == "" && len(got) != 0:
				t.Errorf("stored %+v, want nothing", got)
			case tc.wantStored != "" && (len(got) != 1 || !got[0].Encrypted || !jsonEqual(got[0].Payload, tc.wantStored)):
				t.Errorf("stored %+v, want %s flagged encrypted", got, tc.wantStored)
			}
		})
	}
}

// Each lookup of a message by transactionId reads one index entry per item, whatever
// PostgreSQL knows of the partitions: here its statistics say a partition holds a message or two
// (many small ones) and the partition looked in holds 5000, where reading the partition per
// item costs 5000 rows each. The push's duplicate probe and the ack's lookup must each find
// the one message that exists.
func TestLookupsByTransactionIDReadOneEntryPerItem(t *testing.T) {
	const big, n = 5000, 200
	e := newStoreEnv(t)
	pid := e.push(items("big", "p", "fill", "m1")...)[0].PartitionID
	e.insertMessages(`SELECT $1::uuid, s, 'm' || s FROM generate_series(2, $2) s`, pid, big)
	e.exec(`INSERT INTO queen.queues (name) SELECT 'small' || g FROM generate_series(1, 50) g`)
	e.exec(`INSERT INTO queen.partitions (queue_id, name) SELECT q.id, 'p' || g FROM queen.queues q, generate_series(1, 100) g
		WHERE q.name LIKE 'small%'`)
	e.insertMessages(`SELECT p.id, 1::int8, 'x' FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name LIKE 'small%'`)
	for _, table := range []string{"queues", "partitions", "segments", "message_transactions"} {
		e.exec(`ANALYZE queen.` + table)
	}
	queues, partitions, pids, txs := make([]string, n), make([]string, n), make([][16]byte, n), make([]string, n)
	for i := range n {
		queues[i], partitions[i], pids[i], txs[i] = persistence.QueueName{Name: "big"}.Stored(), "p", pid, fmt.Sprintf("new-%d", i)
	}
	txs[0] = "m2"
	for _, tc := range []struct {
		name  string
		sql   string
		args  []any
		found string // counts the messages found in the rows r of sql
		// partitions is how many partition rows the lookup may read: one per item, or none
		// (the ack's partitions are named once each by ackPartitionsSQL).
		partitions int
	}{
		{"push", persistence.DuplicateProbeSQL, []any{queues, partitions, txs}, "SELECT count(*) FROM (%s) r", n},
		{"ack", persistence.AckedMessagesSQL, []any{pids, txs}, "SELECT count(seq) FROM (%s) r(ord, seq)", 0},
	} {
		read := explainReads(t, e, e.s.Pool(), tc.sql, tc.args, "SET LOCAL plan_cache_mode = force_custom_plan")
		if read["messages"] > n || read["partitions"] > tc.partitions {
			t.Errorf("%s: the lookup of %d items in one partition read %d messages and %d partitions; want at most %d and %d",
				tc.name, n, read["messages"], read["partitions"], n, tc.partitions)
		}
		if found := e.count(fmt.Sprintf(tc.found, tc.sql), tc.args...); found != 1 {
			t.Errorf("%s: the lookup found %d messages, want 1 (m2)", tc.name, found)
		}
	}
}

// A push stores what it commits to one partition as segments of at most 100 messages, numbered
// on from the partition's head, each message in its place with its payload as pushed; a push to
// two partitions at once writes each its own.
func TestPushWritesSegments(t *testing.T) {
	e := newStoreEnv(t)
	e.push(items("q", "a", "1", "first")...)
	var batch []persistence.PushItem
	var want []string
	for i := range 250 {
		tx := fmt.Sprintf("m%d", i)
		batch = append(batch, items("q", "a", "2", tx)...)
		want = append(want, tx)
		if i%50 == 0 {
			batch = append(batch, items("q", "b", "2", tx)...)
		}
	}
	res := e.push(batch...)
	type segment struct {
		Partition   string
		First, Last int64
		Count       int
		Head, Tail  string
	}
	got := collect[segment](e, `SELECT p.name, s.first_seq, s.last_seq, cardinality(s.ids), s.transaction_ids[1],
			s.transaction_ids[cardinality(s.ids)]
		FROM queen.segments s JOIN queen.partitions p ON p.id = s.partition_id ORDER BY p.name, s.last_seq`)
	wantSegments := []segment{{"a", 1, 1, 1, "first", "first"}, {"a", 2, 101, 100, "m0", "m99"}, {"a", 102, 201, 100, "m100", "m199"},
		{"a", 202, 251, 50, "m200", "m249"}, {"b", 1, 5, 5, "m0", "m200"}}
	if !slices.Equal(got, wantSegments) {
		t.Errorf("segments %+v, want %+v", got, wantSegments)
	}
	stored := e.stored(res[0].PartitionID)
	raw := collect[struct{ P string }](e, `SELECT u.p FROM queen.segments s CROSS JOIN LATERAL unnest(s.payloads) WITH ORDINALITY AS u(p, o)
		WHERE s.partition_id = $1 ORDER BY s.last_seq, u.o`, res[0].PartitionID)
	if len(stored) != 251 || len(raw) != 251 {
		t.Fatalf("%d messages (%d payloads) stored in a, want 251", len(stored), len(raw))
	}
	for i, m := range stored[1:] {
		if m.Seq != int64(i+2) || m.TxID != want[i] || raw[i+1].P != string(payloadOf(want[i], "2")) {
			t.Fatalf("message %d of a: %+v %s, want seq %d, %s, %s", i, m, raw[i+1].P, i+2, want[i], payloadOf(want[i], "2"))
		}
	}
}

// Deleting a message blanks its place in the segment: pops skip it, its transactionId is free
// again, and the segment goes once none of its messages is left.
func TestDeleteMessageInASegment(t *testing.T) {
	e := newStoreEnv(t)
	pid := e.push(items("q", "p", "1", "a", "b", "c")...)[0].PartitionID
	e.push(items("q", "p", "1", "d")...)
	del := func(tx string) {
		t.Helper()
		if found, err := e.s.DeleteMessage(e.ctx, pid, tx); !found || err != nil {
			t.Fatalf("delete %s: %v %v", tx, found, err)
		}
	}
	del("b")
	if found, err := e.s.DeleteMessage(e.ctx, pid, "b"); found || err != nil {
		t.Fatalf("second delete of b: %v %v, want not found", found, err)
	}
	del("d")
	segments := func() int {
		return len(collect[struct{ Last int64 }](e, `SELECT last_seq FROM queen.segments WHERE partition_id = $1`, pid))
	}
	if n := segments(); n != 1 {
		t.Errorf("%d segments after d, the only message of its segment, was deleted; want 1", n)
	}
	if res := e.push(items("q", "p", "2", "b")...); res[0].Status != persistence.StatusQueued {
		t.Fatalf("push of the deleted transactionId b: %+v, want queued", res[0])
	}
	res, _ := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Partition: "p", Batch: 10, AutoAck: true})
	if got, want := txIDs(res.Messages), []string{"a", "c", "b"}; !slices.Equal(got, want) {
		t.Errorf("pop delivered %v, want %v", got, want)
	}
	if got := res.Messages[2]; got.Seq != 5 || string(got.Payload) != string(payloadOf("b", "2")) {
		t.Errorf("the new b: seq %d payload %s, want seq 5 and the new payload", got.Seq, got.Payload)
	}
}

// A claim reads a window of sequence numbers: deleted messages at its head, a segment deleted
// whole and a window of nothing but deleted messages are stepped over within one pop, in order,
// for a pop of one partition and for a wildcard pop, leased or not.
func TestPopStepsOverDeletedMessages(t *testing.T) {
	for _, tc := range []struct {
		name      string
		partition string
		autoAck   bool
	}{{"named partition, autoAck", "p", true}, {"wildcard, leased", "", false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newStoreEnv(t)
			pid := e.push(items("q", "p", "1", "a")...)[0].PartitionID // a segment of its own
			e.push(items("q", "p", "1", "b", "c", "d", "e", "f")...)
			for _, tx := range []string{"a", "b", "c", "e"} {
				if found, err := e.s.DeleteMessage(e.ctx, pid, tx); !found || err != nil {
					t.Fatalf("delete %s: %v %v", tx, found, err)
				}
			}
			var got []string
			for range 3 {
				res, lease := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Partition: tc.partition, Batch: 1, AutoAck: tc.autoAck})
				got = append(got, txIDs(res.Messages)...)
				for _, m := range res.Messages {
					if tc.autoAck {
						continue
					}
					if r := e.ack(persistence.AckItem{PartitionID: m.Partition.ID, TransactionID: m.TransactionID,
						Group: persistence.QueueMode, LeaseID: lease, Status: persistence.AckCompleted}); !r[0].Success {
						t.Fatalf("ack %s: %+v", m.TransactionID, r)
					}
				}
			}
			if want := []string{"d", "f"}; !slices.Equal(got, want) {
				t.Errorf("three pops of one delivered %v, want %v", got, want)
			}
		})
	}
}

// A push locks its partitions on a generic plan (keyedPlans), made once per connection, maybe
// while the queue has one partition. Each partition must still be found through the whole
// (queue_id, name) key once the queue has thousands: a plan that kept only queue_id in the
// index condition read the queue's every partition for every item.
func TestPushLockPlanMadeOnOnePartitionReadsByKey(t *testing.T) {
	const partitions, n = 2000, 10
	e := newStoreEnv(t)
	e.push(items("q", "p0000", "1", "first")...)
	conn := e.prepareOnBrokerConn("lock", persistence.LockPartitionsSQL)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("'p%04d'", i*150)
	}
	execute := fmt.Sprintf("EXECUTE lock(array_fill('q'::text, ARRAY[%d]), ARRAY[%s])", n, strings.Join(names, ", "))
	explainReads(t, e, conn, execute, nil, persistence.KeyedPlans) // makes the plan

	e.fillPartitions("q", partitions, 1)
	read := explainReads(t, e, conn, execute, nil, persistence.KeyedPlans)
	if read["partitions"] > 2*n {
		t.Errorf("locking %d partitions of %d read %d partition rows; want at most %d", n, partitions, read["partitions"], 2*n)
	}
}

// ANALYZE of segments gathers statistics on the columns the broker looks segments up by, and
// none on the arrays: reading every sampled segment's arrays made it last long enough, holding
// its snapshot, for the cursor rows to bloat under consumption (migrations/0009).
func TestAnalyzeOfSegmentsSkipsTheArrays(t *testing.T) {
	e := newStoreEnv(t)
	for i := range 20 {
		e.push(items("q", fmt.Sprintf("p%d", i%4), "analyze", fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i))...)
	}
	e.exec(`ANALYZE queen.segments`)
	rows, err := e.pool.Query(e.ctx, `SELECT attname FROM pg_stats WHERE schemaname = 'queen' AND tablename = 'segments' ORDER BY attname`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"created_at", "first_seq", "last_seq", "partition_id"}; !slices.Equal(got, want) {
		t.Errorf("ANALYZE of segments gathered statistics on %v, want %v", got, want)
	}
}

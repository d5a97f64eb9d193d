package persistence_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"queen/persistence"
)

// A pop delivers up to its batch of messages in sequence order and leases the partition up to
// the last one delivered; autoAck moves the cursor instead. Groups read independently.
func TestPopBatch(t *testing.T) {
	cases := []struct {
		name      string
		group     string
		wildcard  bool
		batch     int
		autoAck   bool
		want      []string
		wantAfter consumerRow // LeaseID may be ownLease
	}{
		{"queue mode, batch 1", persistence.QueueMode, false, 1, false, []string{"a"}, consumerRow{LeaseID: ownLease, LeaseEnd: 1}},
		{"queue mode, batch 3 of 5", persistence.QueueMode, false, 3, false, []string{"a", "b", "c"}, consumerRow{LeaseID: ownLease, LeaseEnd: 3}},
		{"queue mode, batch over the backlog", persistence.QueueMode, false, 10, false, []string{"a", "b", "c", "d", "e"}, consumerRow{LeaseID: ownLease, LeaseEnd: 5}},
		{"group, batch 2", "g", false, 2, false, []string{"a", "b"}, consumerRow{LeaseID: ownLease, LeaseEnd: 2}},
		{"group, wildcard, batch 4", "g", true, 4, false, []string{"a", "b", "c", "d"}, consumerRow{LeaseID: ownLease, LeaseEnd: 4}},
		{"autoAck moves the cursor", persistence.QueueMode, false, 2, true, []string{"a", "b"}, consumerRow{Cursor: 2, Consumed: 2, Batches: 1}},
		{"autoAck, group, wildcard", "g", true, 10, true, []string{"a", "b", "c", "d", "e"}, consumerRow{Cursor: 5, Consumed: 5, Batches: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newStoreEnv(t)
			pushed := e.push(items("q", "p", "1", "a", "b", "c", "d", "e")...)
			pid := pushed[0].PartitionID
			r := persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Partition: "p", Group: tc.group, Batch: tc.batch, AutoAck: tc.autoAck}
			if tc.wildcard {
				r.Partition = ""
			}
			res, lease := e.pop(r)
			if got := txIDs(res.Messages); res.Outcome != persistence.PopOK || !slices.Equal(got, tc.want) {
				t.Fatalf("pop delivered %v (%q), want %v", got, res.Outcome, tc.want)
			}
			for i, m := range res.Messages {
				if m.Seq != int64(i+1) || m.ID != pushed[i].MessageID || m.Partition.ID != pid || m.Partition.Name != "p" ||
					!jsonEqual(string(m.Payload), string(payloadOf(m.TransactionID, "1"))) {
					t.Errorf("message %d: %+v, want seq %d id %s of partition p", i, m, i+1, pushed[i].MessageID)
				}
			}
			if !slices.Equal(res.Partitions, []persistence.Partition{{ID: pid, Name: "p"}}) {
				t.Errorf("claimed %+v", res.Partitions)
			}
			e.checkConsumer(pid, tc.group, lease, tc.wantAfter)
			// Another group starts from the beginning whatever this one did.
			if other, _ := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Group: "other", Batch: 1}); !slices.Equal(txIDs(other.Messages), []string{"a"}) {
				t.Errorf("another group's pop delivered %v", txIDs(other.Messages))
			}
		})
	}
}

// While group g holds the lease of partition p, a second pop of p for g gets nothing: the
// partition pop answers lease_held, the wildcard pop takes another partition or finds none.
// Other groups, and other partitions, are not blocked.
func TestPopLeaseBlocksOnlyItsGroup(t *testing.T) {
	cases := []struct {
		name        string
		group       string
		partition   string // "" for a wildcard pop
		alone       bool   // p is the queue's only partition
		wantOutcome persistence.PopOutcome
		want        []string
	}{
		{"same group, same partition", "g", "p", false, persistence.PopLeaseHeld, nil},
		{"same group, wildcard", "g", "", false, persistence.PopOK, []string{"x"}},
		{"same group, wildcard, no other partition", "g", "", true, persistence.PopNoPartition, nil},
		{"same group, another partition", "g", "other", false, persistence.PopOK, []string{"x"}},
		{"another group, same partition", "h", "p", true, persistence.PopOK, []string{"a", "b"}},
		{"another group, wildcard", "h", "", true, persistence.PopOK, []string{"a", "b"}},
		{"queue mode, same partition", persistence.QueueMode, "p", true, persistence.PopOK, []string{"a", "b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newStoreEnv(t)
			pid := e.push(items("q", "p", "1", "a", "b")...)[0].PartitionID
			if !tc.alone {
				e.push(items("q", "other", "1", "x")...)
			}
			first, lease := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Partition: "p", Group: "g", Batch: 10})
			if !slices.Equal(txIDs(first.Messages), []string{"a", "b"}) {
				t.Fatalf("first pop delivered %v", txIDs(first.Messages))
			}
			res, _ := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Partition: tc.partition, Group: tc.group, Batch: 10})
			if got := txIDs(res.Messages); res.Outcome != tc.wantOutcome || !slices.Equal(got, tc.want) {
				t.Errorf("second pop: %q %v, want %q %v", res.Outcome, got, tc.wantOutcome, tc.want)
			}
			e.checkConsumer(pid, "g", lease, consumerRow{LeaseID: lease, LeaseEnd: 2})
		})
	}
}

// A pop of a named partition that found it free but has to wait for the consumer row (another
// pop is claiming it) does not take over the lease that the other pop took meanwhile: the claim
// rechecks the lease on the row it locks. (A wildcard pop does not wait for the row at all:
// TestWildcardPopSkipsARowAnotherTransactionHolds.)
func TestPopClaimRechecksTheLease(t *testing.T) {
	for _, tc := range []struct {
		partition   string
		wantOutcome persistence.PopOutcome
	}{
		{"p", persistence.PopLeaseHeld},
	} {
		t.Run("partition "+tc.partition, func(t *testing.T) {
			e := newStoreEnv(t)
			pid := e.push(items("q", "p", "1", "a", "b")...)[0].PartitionID
			// Consume a, so the group has a row without a lease for both pops to fight over.
			e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Batch: 1, AutoAck: true})
			other, err := e.pool.Begin(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Rollback(e.ctx)
			if _, err := other.Exec(e.ctx, `SELECT 1 FROM queen.partition_consumers WHERE partition_id = $1 FOR UPDATE`, pid); err != nil {
				t.Fatal(err)
			}
			done := e.popInBackground(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Partition: tc.partition,
				Group: persistence.QueueMode, Batch: 10, Partitions: 1, LeaseID: uuid.New()})
			e.awaitLockWait(func() bool { return len(done) > 0 })
			if _, err := other.Exec(e.ctx, `UPDATE queen.partition_consumers SET lease_id = $2,
				lease_expires_at = now() + interval '1 hour', lease_end_seq = 2 WHERE partition_id = $1`, pid, strangerLease); err != nil {
				t.Fatal(err)
			}
			if err := other.Commit(e.ctx); err != nil {
				t.Fatal(err)
			}
			got := <-done
			if got.err != nil || got.res.Outcome != tc.wantOutcome || len(got.res.Messages) != 0 {
				t.Errorf("pop racing the claim: %+v, %v; want %q and nothing", got.res, got.err, tc.wantOutcome)
			}
			e.checkConsumer(pid, persistence.QueueMode, "", consumerRow{Cursor: 1, LeaseID: strangerLease, LeaseEnd: 2, Consumed: 1, Batches: 1})
		})
	}
}

// An expired lease is claimed again by the next pop, which redelivers from the cursor: what
// the first holder acknowledged is not redelivered, what it did not is. The first holder's
// lease no longer counts.
func TestPopReclaimsExpiredLease(t *testing.T) {
	for _, partition := range []string{"p", ""} {
		t.Run("partition "+partition, func(t *testing.T) {
			e := newStoreEnv(t)
			pid := e.push(items("q", "p", "1", "a", "b", "c")...)[0].PartitionID
			e.setQueue("q", "lease_time = 1")
			first, old := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Partition: partition, Batch: 3})
			if !slices.Equal(txIDs(first.Messages), []string{"a", "b", "c"}) {
				t.Fatalf("first pop delivered %v", txIDs(first.Messages))
			}
			if r := e.ack(ackOf(first.Messages[0], persistence.QueueMode, old, persistence.AckCompleted)); !r[0].Success {
				t.Fatalf("ack of a: %+v", r[0])
			}
			e.expireLease(pid, persistence.QueueMode)

			again, lease := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Partition: partition, Batch: 10})
			if got := seqs(again.Messages); !slices.Equal(got, []int64{2, 3}) {
				t.Fatalf("pop after expiry delivered seqs %v, want [2 3]", got)
			}
			e.checkConsumer(pid, persistence.QueueMode, lease, consumerRow{Cursor: 1, LeaseID: lease, LeaseEnd: 3, Consumed: 1})
			if r := e.ack(ackOf(again.Messages[0], persistence.QueueMode, old, persistence.AckCompleted)); r[0].Success || r[0].Error != persistence.ErrInvalidLease {
				t.Errorf("ack under the expired lease: %+v", r[0])
			}
		})
	}
}

// A named group that has never read a partition starts where its subscription says: from the
// beginning by default, after everything stored for "new", after the messages created at or
// before a timestamp. Queue mode always starts at the beginning. Each first pop auto-acks, so
// the next pop, after one more push, delivers only that push.
func TestPopSubscriptionOfANewGroup(t *testing.T) {
	at := func(s string) *time.Time {
		ts, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return &ts
	}
	cases := []struct {
		name      string
		group     string
		partition string
		now       bool
		from      *time.Time
		want      []string
	}{
		{"default reads all history", "g", "p", false, nil, []string{"a", "b", "c"}},
		{"new skips history", "g", "p", true, nil, nil},
		{"new skips history, wildcard", "g", "", true, nil, nil},
		{"from a timestamp", "g", "p", false, at("2020-01-02T12:00:00Z"), []string{"c"}},
		{"from a timestamp, wildcard", "g", "", false, at("2020-01-02T12:00:00Z"), []string{"c"}},
		{"from before all history", "g", "p", false, at("2019-01-01T00:00:00Z"), []string{"a", "b", "c"}},
		{"from after all history", "g", "p", false, at("2021-01-01T00:00:00Z"), nil},
		{"queue mode ignores new", persistence.QueueMode, "p", true, nil, []string{"a", "b", "c"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newStoreEnv(t)
			pid := e.push(items("q", "p", "1", "a")...)[0].PartitionID
			e.push(items("q", "p", "1", "b")...)
			e.push(items("q", "p", "1", "c")...)
			e.exec(`UPDATE queen.segments SET created_at = timestamptz '2020-01-01T00:00:00Z' + (last_seq - 1) * interval '1 day'
				WHERE partition_id = $1`, pid)
			e.exec(`UPDATE queen.partitions SET last_message_at = '2020-01-03T00:00:00Z' WHERE id = $1`, pid)
			r := persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Partition: tc.partition, Group: tc.group, Batch: 10, AutoAck: true,
				SubscribeNow: tc.now, SubscribeFrom: tc.from}
			if res, _ := e.pop(r); !slices.Equal(txIDs(res.Messages), tc.want) {
				t.Errorf("first pop delivered %v, want %v", txIDs(res.Messages), tc.want)
			}
			e.push(items("q", "p", "2", "d")...)
			if res, _ := e.pop(r); !slices.Equal(txIDs(res.Messages), []string{"d"}) {
				t.Errorf("second pop delivered %v, want [d]", txIDs(res.Messages))
			}
		})
	}
}

// delayedProcessing holds a message back until it is old enough, and a young message holds
// back the ones after it (FIFO); the lease covers only what was delivered.
func TestPopDelayedProcessing(t *testing.T) {
	cases := []struct {
		name string
		old  []int64 // the messages older than the delay
		want []string
	}{
		{"all too young", nil, nil},
		{"first old enough", []int64{1}, []string{"a"}},
		{"a young one stops the batch", []int64{1, 3}, []string{"a"}},
		{"all old enough", []int64{1, 2, 3}, []string{"a", "b", "c"}},
	}
	for _, tc := range cases {
		for _, partition := range []string{"p", ""} {
			t.Run(tc.name+", partition "+partition, func(t *testing.T) {
				e := newStoreEnv(t)
				pid := e.push(items("q", "p", "1", "a")...)[0].PartitionID
				e.push(items("q", "p", "1", "b")...)
				e.push(items("q", "p", "1", "c")...)
				e.setQueue("q", "delayed_processing = 3600")
				e.exec(`UPDATE queen.segments SET created_at = now() - interval '2 hours' WHERE partition_id = $1 AND last_seq = ANY($2)`, pid, tc.old)
				res, lease := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Partition: partition, Batch: 10})
				if got := txIDs(res.Messages); !slices.Equal(got, tc.want) {
					t.Fatalf("pop delivered %v, want %v", got, tc.want)
				}
				want := consumerRow{LeaseID: lease, LeaseEnd: int64(len(tc.want))}
				if len(tc.want) == 0 {
					want = consumerRow{} // nothing delivered: the claim is released
				}
				e.checkConsumer(pid, persistence.QueueMode, lease, want)
			})
		}
	}
}

// windowBuffer holds a partition back while messages are still arriving: until its last
// message is windowBuffer seconds old, the partition pop answers window_buffer_active and the
// wildcard pop finds no partition.
func TestPopWindowBuffer(t *testing.T) {
	cases := []struct {
		name        string
		lastAt      string // SQL for partitions.last_message_at
		partition   string
		wantOutcome persistence.PopOutcome
		want        []string
	}{
		{"recent message, partition", "now()", "p", persistence.PopWindowBufferActive, nil},
		{"recent message, wildcard", "now()", "", persistence.PopNoPartition, nil},
		{"quiet partition", "now() - interval '2 hours'", "p", persistence.PopOK, []string{"a", "b"}},
		{"quiet partition, wildcard", "now() - interval '2 hours'", "", persistence.PopOK, []string{"a", "b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newStoreEnv(t)
			pid := e.push(items("q", "p", "1", "a", "b")...)[0].PartitionID
			e.setQueue("q", "window_buffer = 3600")
			e.exec(`UPDATE queen.partitions SET last_message_at = `+tc.lastAt+` WHERE id = $1`, pid)
			res, _ := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Partition: tc.partition, Batch: 10})
			if got := txIDs(res.Messages); res.Outcome != tc.wantOutcome || !slices.Equal(got, tc.want) {
				t.Errorf("pop: %q %v, want %q %v", res.Outcome, got, tc.wantOutcome, tc.want)
			}
		})
	}
}

// A partition that has never received a message (configure's Default partition) has no
// last_message_at: with a windowBuffer, popping it answers an empty pop, not an error.
func TestPopWindowBufferOnAnEmptyPartition(t *testing.T) {
	e := newStoreEnv(t)
	q, err := e.s.Configure(e.ctx, persistence.ConfigureRequest{Queue: persistence.QueueName{Name: "q"},
		Options: persistence.QueueOptionsPatch{WindowBuffer: new(60)}})
	if err != nil {
		t.Fatal(err)
	}
	res, _ := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Partition: "Default", Batch: 10})
	if res.Outcome != persistence.PopOK || len(res.Messages) != 0 {
		t.Errorf("pop of the empty partition: %+v", res)
	}
	if got := e.consumer(q.PartitionID, persistence.QueueMode); got.LeaseID != "" {
		t.Errorf("the empty claim kept its lease: %+v", got)
	}
}

// A wildcard pop claims up to Partitions partitions under one lease and spends one batch
// across them: each claimed partition is leased up to the last message it delivered, the
// others stay free.
func TestPopClaimsUpToNPartitions(t *testing.T) {
	cases := []struct {
		name        string
		partitions  int
		batch       int
		wantClaimed int
		wantTotal   int
	}{
		{"one partition", 1, 10, 1, 2},
		{"two partitions", 2, 10, 2, 4},
		{"the batch runs out in the second", 3, 3, 2, 3},
		{"more than there are", 5, 10, 3, 6},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newStoreEnv(t)
			pids := map[uuid.UUID]string{}
			for _, name := range []string{"p1", "p2", "p3"} {
				pids[e.push(items("q", name, "1", name+"-a", name+"-b")...)[0].PartitionID] = name
			}
			res, lease := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Partitions: tc.partitions, Batch: tc.batch})
			if len(res.Partitions) != tc.wantClaimed || len(res.Messages) != tc.wantTotal {
				t.Fatalf("claimed %d partitions, %d messages; want %d, %d", len(res.Partitions), len(res.Messages), tc.wantClaimed, tc.wantTotal)
			}
			delivered := map[uuid.UUID][]string{}
			for _, m := range res.Messages {
				delivered[m.Partition.ID] = append(delivered[m.Partition.ID], m.TransactionID)
			}
			claimed := map[uuid.UUID]bool{}
			for _, p := range res.Partitions {
				claimed[p.ID] = true
				name := pids[p.ID]
				got := delivered[p.ID]
				if want := []string{name + "-a", name + "-b"}[:len(got)]; len(got) == 0 || !slices.Equal(got, want) {
					t.Errorf("partition %s delivered %v, want a prefix of its messages", name, got)
				}
				e.checkConsumer(p.ID, persistence.QueueMode, lease, consumerRow{LeaseID: lease, LeaseEnd: int64(len(got))})
			}
			for pid, name := range pids {
				if !claimed[pid] && (len(delivered[pid]) != 0 || e.consumer(pid, persistence.QueueMode) != (consumerRow{})) {
					t.Errorf("unclaimed partition %s was touched: %v, %+v", name, delivered[pid], e.consumer(pid, persistence.QueueMode))
				}
			}
		})
	}
}

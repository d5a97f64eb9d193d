package persistence_test

import (
	"slices"
	"strconv"
	"testing"

	"queen/persistence"
)

// ackStep acknowledges message seq (1..3) of the test partition.
type ackStep struct {
	seq    int
	status persistence.AckStatus
	err    string // the failure text sent with a failed ack
	lease  string // ownLease, "" (none) or a literal lease id
	tx     string // overrides the message's transactionId
}

func done(seq int) ackStep {
	return ackStep{seq: seq, status: persistence.AckCompleted, lease: ownLease}
}
func failed(seq int, err string) ackStep {
	return ackStep{seq: seq, status: persistence.AckFailed, err: err, lease: ownLease}
}

// ackCase is one Ack call of TestAckMovesCursorAndLease and what it must leave behind.
type ackCase struct {
	name       string
	retryLimit int
	noPop      bool // acknowledge without a pop: no lease is in force
	expired    bool // the pop's lease expires before the acks
	acks       []ackStep
	want       []persistence.AckResult // without QueueName and PartitionName
	wantRow    consumerRow             // LeaseID may be ownLease
	wantDLQ    []deadLetter
	wantNext   []int64 // what the next pop delivers, the lease expired if still held
}

// One Ack call on a partition of three messages that a pop delivered under one lease (unless
// noPop): per item answer, the cursor and lease afterwards, the dead letters written and what
// the next pop delivers.
func TestAckMovesCursorAndLease(t *testing.T) {
	ok := persistence.AckResult{Success: true}
	released := persistence.AckResult{Success: true, LeaseReleased: true}
	cases := []ackCase{
		{
			name: "completed first message keeps the lease", retryLimit: 3,
			acks:     []ackStep{done(1)},
			want:     []persistence.AckResult{ok},
			wantRow:  consumerRow{Cursor: 1, LeaseID: ownLease, LeaseEnd: 3, Consumed: 1},
			wantNext: []int64{2, 3},
		},
		{
			name: "completed batch releases at its end", retryLimit: 3,
			acks:    []ackStep{done(1), done(2), done(3)},
			want:    []persistence.AckResult{ok, ok, released},
			wantRow: consumerRow{Cursor: 3, Consumed: 3, Batches: 1},
		},
		{
			name: "acks apply in sequence order", retryLimit: 3,
			acks:    []ackStep{done(3), done(1)},
			want:    []persistence.AckResult{released, ok},
			wantRow: consumerRow{Cursor: 3, Consumed: 3, Batches: 1},
		},
		{
			name: "failed under the retry limit releases without moving", retryLimit: 3,
			acks:     []ackStep{failed(1, "boom")},
			want:     []persistence.AckResult{released},
			wantRow:  consumerRow{Retries: 1},
			wantNext: []int64{1, 2, 3},
		},
		{
			name: "retry releases without spending a retry", retryLimit: 3,
			acks:     []ackStep{{seq: 2, status: persistence.AckRetry, lease: ownLease}},
			want:     []persistence.AckResult{released},
			wantRow:  consumerRow{},
			wantNext: []int64{1, 2, 3},
		},
		{
			name: "failed at the retry limit dead-letters", retryLimit: 0,
			acks:     []ackStep{failed(1, "boom")},
			want:     []persistence.AckResult{{Success: true, DLQ: true}},
			wantRow:  consumerRow{Cursor: 1, LeaseID: ownLease, LeaseEnd: 3, Consumed: 1},
			wantDLQ:  []deadLetter{{Seq: 1, Group: persistence.QueueMode, Error: "boom"}},
			wantNext: []int64{2, 3},
		},
		{
			name: "failed without a text dead-letters as retries exhausted", retryLimit: 0,
			acks:    []ackStep{done(1), done(2), failed(3, "")},
			want:    []persistence.AckResult{ok, ok, {Success: true, DLQ: true, LeaseReleased: true}},
			wantRow: consumerRow{Cursor: 3, Consumed: 3, Batches: 1},
			wantDLQ: []deadLetter{{Seq: 3, Group: persistence.QueueMode, Error: "Retries exhausted"}},
		},
		{
			name: "dlq status dead-letters within the retry limit", retryLimit: 3,
			acks:     []ackStep{{seq: 2, status: persistence.AckDLQ, err: "poison", lease: ownLease}},
			want:     []persistence.AckResult{{Success: true, DLQ: true}},
			wantRow:  consumerRow{Cursor: 2, LeaseID: ownLease, LeaseEnd: 3, Consumed: 2},
			wantDLQ:  []deadLetter{{Seq: 2, Group: persistence.QueueMode, Error: "poison"}},
			wantNext: []int64{3},
		},
		{
			name: "wrong lease is refused", retryLimit: 3,
			acks:     []ackStep{{seq: 1, status: persistence.AckCompleted, lease: strangerLease}},
			want:     []persistence.AckResult{{Error: persistence.ErrInvalidLease}},
			wantRow:  consumerRow{LeaseID: ownLease, LeaseEnd: 3},
			wantNext: []int64{1, 2, 3},
		},
		{
			name: "completed after the lease expired is refused", retryLimit: 3, expired: true,
			acks:     []ackStep{done(1), done(2), done(3)},
			want:     []persistence.AckResult{{Error: persistence.ErrInvalidLease}, {Error: persistence.ErrInvalidLease}, {Error: persistence.ErrInvalidLease}},
			wantRow:  consumerRow{LeaseID: ownLease, LeaseEnd: 3},
			wantNext: []int64{1, 2, 3},
		},
		{
			name: "one message acknowledged twice", retryLimit: 3,
			acks:    []ackStep{done(1), done(3), done(2), done(3)},
			want:    []persistence.AckResult{ok, released, ok, {Error: persistence.ErrInvalidLease}},
			wantRow: consumerRow{Cursor: 3, Consumed: 3, Batches: 1},
		},
		{
			name: "no lease while one is in force is refused", retryLimit: 3,
			acks:     []ackStep{{seq: 3, status: persistence.AckCompleted}},
			want:     []persistence.AckResult{{Error: persistence.ErrInvalidLease}},
			wantRow:  consumerRow{LeaseID: ownLease, LeaseEnd: 3},
			wantNext: []int64{1, 2, 3},
		},
		{
			name: "unknown transactionId is not found", retryLimit: 3,
			acks:     []ackStep{{seq: 1, status: persistence.AckCompleted, lease: ownLease, tx: "nope"}, done(1)},
			want:     []persistence.AckResult{{Error: persistence.ErrMessageNotFound}, ok},
			wantRow:  consumerRow{Cursor: 1, LeaseID: ownLease, LeaseEnd: 3, Consumed: 1},
			wantNext: []int64{2, 3},
		},
		{
			// The failed ack ends the lease, so the later completed ack is refused: either
			// way the cursor stays below the failed message, which is redelivered.
			name: "failed between completed acks holds the cursor", retryLimit: 3,
			acks:     []ackStep{done(1), failed(2, "boom"), done(3)},
			want:     []persistence.AckResult{ok, released, {Error: persistence.ErrInvalidLease}},
			wantRow:  consumerRow{Cursor: 1, Consumed: 1, Retries: 1},
			wantNext: []int64{2, 3},
		},
		{
			name: "failed between completed acks without a lease holds the cursor", retryLimit: 3, noPop: true,
			acks: []ackStep{{seq: 1, status: persistence.AckCompleted}, {seq: 2, status: persistence.AckFailed},
				{seq: 3, status: persistence.AckCompleted}},
			want:     []persistence.AckResult{ok, ok, ok},
			wantRow:  consumerRow{Cursor: 1, Consumed: 1, Retries: 1},
			wantNext: []int64{2, 3},
		},
		{
			name: "dead-lettered between completed acks lets the cursor pass", retryLimit: 0,
			acks:    []ackStep{done(1), failed(2, "bad"), done(3)},
			want:    []persistence.AckResult{ok, {Success: true, DLQ: true}, released},
			wantRow: consumerRow{Cursor: 3, Consumed: 3, Batches: 1},
			wantDLQ: []deadLetter{{Seq: 2, Group: persistence.QueueMode, Error: "bad"}},
		},
	}
	// The broker that granted a lease remembers what it delivered (leasedMessages); another
	// broker of the mesh, or one restarted, finds the messages in the database. Both must agree.
	for _, tc := range cases {
		for _, by := range []string{"the popping broker", "another broker"} {
			t.Run(tc.name+"/acked by "+by, func(t *testing.T) {
				tc.run(t, by == "another broker")
			})
		}
	}
}

// run pushes three messages, pops them under a lease (unless noPop) and applies the acks, through
// another Store on the same database when otherBroker.
func (tc ackCase) run(t *testing.T, otherBroker bool) {
	e := newStoreEnv(t)
	pushed := e.push(items("q", "p", "1", "a", "b", "c")...)
	pid := pushed[0].PartitionID
	e.setQueue("q", "retry_limit = "+strconv.Itoa(tc.retryLimit))
	lease := ""
	if !tc.noPop {
		var res persistence.PopResult
		res, lease = e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Partition: "p", Batch: 3})
		if len(res.Messages) != 3 {
			t.Fatalf("pop delivered %v", txIDs(res.Messages))
		}
		if tc.expired {
			e.expireLease(pid, persistence.QueueMode)
		}
	}
	acks := make([]persistence.AckItem, len(tc.acks))
	for i, a := range tc.acks {
		acks[i] = persistence.AckItem{PartitionID: pid, TransactionID: []string{"a", "b", "c"}[a.seq-1],
			Group: persistence.QueueMode, LeaseID: resolveLease(a.lease, lease), Status: a.status, Error: a.err}
		if a.tx != "" {
			acks[i].TransactionID = a.tx
		}
	}
	if otherBroker {
		e.s = persistence.NewStore(e.pool)
	}
	res := e.ack(acks...)
	for i, r := range res {
		// Every item names a message of partition p, found or not.
		if r.Queue != (persistence.QueueName{Name: "q"}) || r.PartitionName != "p" {
			t.Errorf("ack %d names %v/%v", i, r.Queue, r.PartitionName)
		}
		if unnamed(r) != tc.want[i] {
			t.Errorf("ack %d: %+v, want %+v", i, r, tc.want[i])
		}
	}
	e.checkConsumer(pid, persistence.QueueMode, lease, tc.wantRow)
	e.checkDeadLetters(pid, tc.wantDLQ)
	if tc.wantRow.LeaseID != "" {
		e.expireLease(pid, persistence.QueueMode)
	}
	if next, _ := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Partition: "p", Batch: 10}); !slices.Equal(seqs(next.Messages), tc.wantNext) {
		t.Errorf("next pop delivered %v, want %v", seqs(next.Messages), tc.wantNext)
	}
}

// A message that keeps failing is redelivered retryLimit times, then dead-lettered with the
// number of retries it had and the last error; the cursor then passes it.
func TestAckFailedBeyondRetryLimitDeadLetters(t *testing.T) {
	e := newStoreEnv(t)
	pid := e.push(items("q", "p", "1", "a", "b")...)[0].PartitionID
	e.setQueue("q", "retry_limit = 2")
	for attempt := 1; attempt <= 3; attempt++ {
		res, lease := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Partition: "p", Batch: 1})
		if !slices.Equal(txIDs(res.Messages), []string{"a"}) {
			t.Fatalf("attempt %d delivered %v, want [a]", attempt, txIDs(res.Messages))
		}
		r := e.ack(ackOf(res.Messages[0], persistence.QueueMode, lease, persistence.AckFailed))[0]
		if want := (persistence.AckResult{Success: true, LeaseReleased: true, DLQ: attempt == 3}); unnamed(r) != want {
			t.Errorf("attempt %d: %+v, want %+v", attempt, r, want)
		}
		wantRetries := attempt
		if attempt == 3 {
			wantRetries = 0 // the batch is over
		}
		if got := e.consumer(pid, persistence.QueueMode); got.Retries != wantRetries {
			t.Errorf("attempt %d: %d retries counted, want %d", attempt, got.Retries, wantRetries)
		}
	}
	e.checkDeadLetters(pid, []deadLetter{{Seq: 1, Group: persistence.QueueMode, Error: "Retries exhausted", Retries: 2}})
	if res, _ := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Partition: "p", Batch: 10}); !slices.Equal(txIDs(res.Messages), []string{"b"}) {
		t.Errorf("after the dead letter the pop delivered %v, want [b]", txIDs(res.Messages))
	}
}

// unnamed is r without the queue and partition names, to compare the outcome alone.
func unnamed(r persistence.AckResult) persistence.AckResult {
	return persistence.AckResult{Success: r.Success, Error: r.Error, LeaseReleased: r.LeaseReleased, DLQ: r.DLQ}
}

// An ack batch over two partitions, each popped under its own lease, of which one expired before
// the acks: the live lease's row is completed and released, the expired one's acks are refused
// and its row left as it was, whatever broker answers.
func TestAckBatchWithOneLeaseExpired(t *testing.T) {
	for _, by := range []string{"the popping broker", "another broker"} {
		t.Run("acked by "+by, func(t *testing.T) {
			e := newStoreEnv(t)
			live := e.push(items("q", "live", "1", "a", "b")...)[0].PartitionID
			gone := e.push(items("q", "gone", "1", "c", "d")...)[0].PartitionID
			var acks []persistence.AckItem
			leases := map[string]string{}
			for _, p := range []string{"live", "gone"} {
				res, lease := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Partition: p, Batch: 2})
				if len(res.Messages) != 2 {
					t.Fatalf("pop of %s delivered %v", p, txIDs(res.Messages))
				}
				leases[p] = lease
				for _, m := range res.Messages {
					acks = append(acks, ackOf(m, persistence.QueueMode, lease, persistence.AckCompleted))
				}
			}
			e.expireLease(gone, persistence.QueueMode)
			if by == "another broker" {
				e.s = persistence.NewStore(e.pool)
			}
			res := e.ack(acks...)
			invalid := persistence.AckResult{Error: persistence.ErrInvalidLease}
			want := []persistence.AckResult{{Success: true}, {Success: true, LeaseReleased: true}, invalid, invalid}
			for i, r := range res {
				if unnamed(r) != want[i] {
					t.Errorf("ack %d: %+v, want %+v", i, r, want[i])
				}
			}
			if res[0].PartitionName != "live" || res[1].PartitionName != "live" || res[0].Queue.Name != "q" {
				t.Errorf("the completed acks name %v/%s", res[0].Queue, res[0].PartitionName)
			}
			e.checkConsumer(live, persistence.QueueMode, leases["live"], consumerRow{Cursor: 2, Consumed: 2, Batches: 1})
			e.checkConsumer(gone, persistence.QueueMode, leases["gone"], consumerRow{LeaseID: ownLease, LeaseEnd: 2})
		})
	}
}

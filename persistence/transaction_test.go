package persistence_test

import (
	"slices"
	"testing"

	"github.com/google/uuid"

	"queen/persistence"
)

// A transaction applies its acks and pushes together or not at all. The source message "in"
// has been popped under a lease; the output partition out/p holds "old" already.
func TestTransactionIsAtomic(t *testing.T) {
	type env struct {
		src   persistence.Message
		lease string
	}
	ack := func(status persistence.AckStatus, lease, tx, reason string) func(env) persistence.TxOp {
		return func(v env) persistence.TxOp {
			a := ackOf(v.src, persistence.QueueMode, resolveLease(lease, v.lease), status)
			a.Error = reason
			if tx != "" {
				a.TransactionID = tx
			}
			return persistence.TxOp{Ack: &a}
		}
	}
	// holding adds the leases a transaction lists in requiredLeases to an ack operation.
	holding := func(op func(env) persistence.TxOp, leases ...string) func(env) persistence.TxOp {
		return func(v env) persistence.TxOp {
			o := op(v)
			for _, l := range leases {
				o.Ack.HeldLeases = append(o.Ack.HeldLeases, resolveLease(l, v.lease))
			}
			return o
		}
	}
	push := func(it ...persistence.PushItem) func(env) persistence.TxOp {
		return func(env) persistence.TxOp { return persistence.TxOp{Push: it} }
	}
	completed := ack(persistence.AckCompleted, ownLease, "", "")
	pushNew := push(slices.Concat(items("out", "p", "tx", "new"), items("fresh", "p", "tx", "new"))...)
	cases := []struct {
		name       string
		ops        []func(env) persistence.TxOp
		wantReason string
		wantStatus []persistence.PushStatus // of every pushed item, in op order
		wantStored []string                 // out/p's messages afterwards
		wantSrc    consumerRow
		wantDLQ    []deadLetter
	}{
		{
			name:       "ack and push commit together",
			ops:        []func(env) persistence.TxOp{completed, pushNew},
			wantStatus: []persistence.PushStatus{"queued", "queued"},
			wantStored: []string{"old", "new"},
			wantSrc:    consumerRow{Cursor: 1, Consumed: 1, Batches: 1},
		},
		{
			name:       "a wrong lease rolls back the push before it",
			ops:        []func(env) persistence.TxOp{pushNew, ack(persistence.AckCompleted, strangerLease, "", "")},
			wantReason: "ACK operation failed: " + persistence.ErrInvalidLease,
			wantStatus: []persistence.PushStatus{"queued", "queued"},
			wantStored: []string{"old"},
			wantSrc:    consumerRow{LeaseID: ownLease, LeaseEnd: 1},
		},
		{
			name:       "an ack without leaseId applies under a lease the transaction holds",
			ops:        []func(env) persistence.TxOp{holding(ack(persistence.AckCompleted, "", "", ""), strangerLease, ownLease), pushNew},
			wantStatus: []persistence.PushStatus{"queued", "queued"},
			wantStored: []string{"old", "new"},
			wantSrc:    consumerRow{Cursor: 1, Consumed: 1, Batches: 1},
		},
		{
			name:       "an ack without leaseId is refused under a lease the transaction does not hold",
			ops:        []func(env) persistence.TxOp{pushNew, holding(ack(persistence.AckCompleted, "", "", ""), strangerLease)},
			wantReason: "ACK operation failed: " + persistence.ErrInvalidLease,
			wantStatus: []persistence.PushStatus{"queued", "queued"},
			wantStored: []string{"old"},
			wantSrc:    consumerRow{LeaseID: ownLease, LeaseEnd: 1},
		},
		{
			name:       "an ack naming a wrong lease is refused whatever the transaction holds",
			ops:        []func(env) persistence.TxOp{pushNew, holding(ack(persistence.AckCompleted, strangerLease, "", ""), ownLease)},
			wantReason: "ACK operation failed: " + persistence.ErrInvalidLease,
			wantStatus: []persistence.PushStatus{"queued", "queued"},
			wantStored: []string{"old"},
			wantSrc:    consumerRow{LeaseID: ownLease, LeaseEnd: 1},
		},
		{
			name:       "an unknown message rolls back the push before it",
			ops:        []func(env) persistence.TxOp{pushNew, ack(persistence.AckCompleted, ownLease, "nope", "")},
			wantReason: "ACK operation failed: " + persistence.ErrMessageNotFound,
			wantStatus: []persistence.PushStatus{"queued", "queued"},
			wantStored: []string{"old"},
			wantSrc:    consumerRow{LeaseID: ownLease, LeaseEnd: 1},
		},
		{
			name:       "a refused push rolls back the ack before it",
			ops:        []func(env) persistence.TxOp{completed, push(items("vault", "p", "tx", "new")...)},
			wantReason: "PUSH operation failed: " + persistence.EncryptionRequired(persistence.QueueName{Name: "vault"}),
			wantStatus: []persistence.PushStatus{"failed"},
			wantStored: []string{"old"},
			wantSrc:    consumerRow{LeaseID: ownLease, LeaseEnd: 1},
		},
		{
			name:       "a failed ack dead-letters at once",
			ops:        []func(env) persistence.TxOp{ack(persistence.AckFailed, ownLease, "", "boom"), pushNew},
			wantStatus: []persistence.PushStatus{"queued", "queued"},
			wantStored: []string{"old", "new"},
			wantSrc:    consumerRow{Cursor: 1, Consumed: 1, Batches: 1},
			wantDLQ:    []deadLetter{{Seq: 1, Group: persistence.QueueMode, Error: "boom"}},
		},
		{
			name: "duplicate pushes answer duplicate",
			ops: []func(env) persistence.TxOp{push(items("out", "p", "tx", "old", "new", "new")...), completed,
				push(items("out", "p", "tx", "new")...)},
			wantStatus: []persistence.PushStatus{"duplicate", "queued", "duplicate", "duplicate"},
			wantStored: []string{"old", "new"},
			wantSrc:    consumerRow{Cursor: 1, Consumed: 1, Batches: 1},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newStoreEnv(t)
			srcPid := e.push(items("src", "p", "1", "in")...)[0].PartitionID
			outPid := e.push(items("out", "p", "1", "old")...)[0].PartitionID
			e.encryptQueue("vault")
			popped, lease := e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "src"}, Batch: 1})
			if len(popped.Messages) != 1 {
				t.Fatalf("pop of the source delivered %v", txIDs(popped.Messages))
			}
			ops := make([]persistence.TxOp, len(tc.ops))
			for i, op := range tc.ops {
				ops[i] = op(env{popped.Messages[0], lease})
			}

			res, reason, err := e.s.Transaction(e.ctx, ops)
			if err != nil {
				t.Fatal(err)
			}
			if reason != tc.wantReason {
				t.Errorf("reason %q, want %q", reason, tc.wantReason)
			}
			stored := e.stored(outPid)
			storedID := map[string]uuid.UUID{}
			var storedTx []string
			for _, m := range stored {
				storedID[m.TxID] = m.ID
				storedTx = append(storedTx, m.TxID)
			}
			var statuses []persistence.PushStatus
			pushedFresh := false
			for i, r := range res {
				for j, p := range r.Push {
					statuses = append(statuses, p.Status)
					it := ops[i].Push[j]
					pushedFresh = pushedFresh || it.Queue.Name == "fresh"
					// Committed, a queued item and a duplicate both name the stored message.
					if tc.wantReason == "" && it.Queue.Name == "out" && p.MessageID != storedID[it.TransactionID] {
						t.Errorf("push of %s answered id %s, %s is stored", it.TransactionID, p.MessageID, storedID[it.TransactionID])
					}
				}
			}
			if !slices.Equal(statuses, tc.wantStatus) {
				t.Errorf("push statuses %v, want %v", statuses, tc.wantStatus)
			}
			if !slices.Equal(storedTx, tc.wantStored) {
				t.Errorf("out/p stores %v, want %v", storedTx, tc.wantStored)
			}
			// A rolled back push leaves no trace, not even the queue it created.
			if n := e.count(`SELECT count(*) FROM queen.queues WHERE name = 'fresh'`); (n == 1) != (pushedFresh && tc.wantReason == "") {
				t.Errorf("%d queues named fresh after pushing to it: %v", n, pushedFresh)
			}
			e.checkConsumer(srcPid, persistence.QueueMode, lease, tc.wantSrc)
			e.checkDeadLetters(srcPid, tc.wantDLQ)
		})
	}
}

package persistence

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
)

func leasedBatch(partition uuid.UUID, first, n int) []Message {
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i] = Message{Seq: int64(first + i), TransactionID: fmt.Sprintf("tx-%d", first+i),
			Partition: Partition{ID: partition, Name: "p-" + partition.String()[:8]}}
	}
	return msgs
}

// hitSeqs is the seq of each hit, nil for no hits, for comparing lookUp's answer.
func hitSeqs(hits []leasedHit) []int64 {
	if hits == nil {
		return nil
	}
	seqs := make([]int64, len(hits))
	for i, h := range hits {
		seqs[i] = h.seq
	}
	return seqs
}

var leasedQueue = QueueName{Tenant: "t", Name: "q"}

// What a lease delivered is found by (lease, partition, transactionId) until the lease is
// forgotten or the message deleted, and never under another lease or partition.
func TestLeasedMessagesLookUp(t *testing.T) {
	l := newLeasedMessages()
	lease, p1, p2 := uuid.New(), uuid.New(), uuid.New()
	// A wildcard pop: two partitions under one lease.
	l.remember(lease, leasedQueue, append(leasedBatch(p1, 1, 3), leasedBatch(p2, 7, 2)...))
	item := func(lease string, p uuid.UUID, tx string) AckItem {
		return AckItem{LeaseID: lease, PartitionID: p, TransactionID: tx}
	}
	got := l.lookUp([]AckItem{
		item(lease.String(), p1, "tx-2"),
		item(lease.String(), p2, "tx-8"),
		item(lease.String(), p2, "tx-2"),       // another partition's message
		item(uuid.NewString(), p1, "tx-2"),     // another lease
		item("", p1, "tx-2"),                   // no lease named
		item(lease.String(), p1, "tx-unknown"), // never delivered
	})
	if want := []int64{2, 8, 0, 0, 0, 0}; fmt.Sprint(hitSeqs(got)) != fmt.Sprint(want) {
		t.Errorf("lookUp: %v, want %v", hitSeqs(got), want)
	}
	// A hit names the queue and partition its ack answers with.
	for i, p := range []uuid.UUID{p1, p2} {
		if c := got[i].claim; c.queue != leasedQueue || c.partition != "p-"+p.String()[:8] {
			t.Errorf("hit %d names %v/%s", i, c.queue, c.partition)
		}
	}
	l.forgetTransaction(p1, "tx-2")
	l.forget(lease.String(), p2)
	if got := l.lookUp([]AckItem{item(lease.String(), p1, "tx-2"), item(lease.String(), p2, "tx-8")}); got != nil {
		t.Errorf("after forgetting: %v, want nil", got)
	}
	if got := hitSeqs(l.lookUp([]AckItem{item(lease.String(), p1, "tx-3")})); fmt.Sprint(got) != "[3]" {
		t.Errorf("the rest of the lease: %v, want [3]", got)
	}
	if l.held != 2 {
		t.Errorf("held %d messages, want 2", l.held)
	}
}

// The cache holds at most maxLeasedMessages, forgetting the oldest leases first, and its
// eviction list does not grow with leases that were released.
func TestLeasedMessagesStayBounded(t *testing.T) {
	l := newLeasedMessages()
	p := uuid.New()
	first := uuid.New()
	l.remember(first, leasedQueue, leasedBatch(p, 1, 1000))
	for i := range 10_000 {
		lease := uuid.New()
		l.remember(lease, leasedQueue, leasedBatch(p, 1, 100))
		if i%2 == 0 {
			l.forget(lease.String(), p)
		}
	}
	if l.held > maxLeasedMessages {
		t.Errorf("held %d messages, more than %d", l.held, maxLeasedMessages)
	}
	if got := l.lookUp([]AckItem{{LeaseID: first.String(), PartitionID: p, TransactionID: "tx-1"}}); got != nil {
		t.Errorf("the oldest lease is still remembered: %v", got)
	}
	if len(l.order) > 2*len(l.leases)+64 {
		t.Errorf("eviction list of %d keys for %d leases", len(l.order), len(l.leases))
	}
}

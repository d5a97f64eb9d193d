package persistence_test

import (
	"slices"
	"testing"

	"github.com/google/uuid"

	"queen/persistence"
	"queen/pg/pgtest"
)

// A fused ack call mixes the items of several tenants: each item is resolved in its own scope,
// so one naming another tenant's partition is not found (no names either) while the owner's
// item in the same call applies.
func TestAckScopesEachItemOfAFusedCall(t *testing.T) {
	pool, _ := pgtest.NewPool(t)
	s := persistence.NewStore(pool)
	ctx := retentionCtx(t)
	tenantQueue := persistence.QueueName{Tenant: "globex", Name: "ledger"}
	plainQueue := persistence.QueueName{Name: "ledger"}
	tenants := retentionPush(t, s, tenantQueue, "p", 3)
	plain := retentionPush(t, s, plainQueue, "p", 1)
	ack := func(pid uuid.UUID, tx, tenant string) persistence.AckItem {
		return persistence.AckItem{PartitionID: pid, TransactionID: tx, Group: persistence.QueueMode,
			Status: persistence.AckCompleted, Scope: persistence.Scope{Tenant: tenant}}
	}
	res, err := s.Ack(ctx, []persistence.AckItem{
		ack(tenants, "tx-3", "acme"), // another tenant's partition
		ack(tenants, "tx-2", ""),     // the default tenant does not reach tenants' queues
		ack(plain, "tx-1", "acme"),   // nor tenants the default tenant's
		ack(tenants, "tx-1", "globex"),
		ack(plain, "tx-1", ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res[:3] {
		if r.Success || r.Error != persistence.ErrMessageNotFound || r.Queue != (persistence.QueueName{}) || r.PartitionName != "" {
			t.Errorf("item %d, outside its scope: %+v", i, r)
		}
	}
	if r := res[3]; !r.Success || r.Queue != tenantQueue {
		t.Errorf("the owner's item: %+v", r)
	}
	if r := res[4]; !r.Success || r.Queue != plainQueue {
		t.Errorf("the default tenant's item: %+v", r)
	}
	for pid, want := range map[uuid.UUID]int64{tenants: 1, plain: 1} {
		var cursor int64
		if err := pool.QueryRow(ctx, `SELECT cursor_seq FROM queen.partition_consumers
			WHERE partition_id = $1 AND consumer_group = $2`, pid, persistence.QueueMode).Scan(&cursor); err != nil {
			t.Fatal(err)
		}
		if cursor != want {
			t.Errorf("cursor of %s: %d, want %d", pid, cursor, want)
		}
	}
}

// An ack naming the lease it was delivered under finds its message without the database's
// lookup, but the answers stay those of the lookup: a message deleted since the pop is not
// found, and a partition outside the caller's tenant is not found either.
func TestAckOfARememberedLeaseAnswersAsTheLookup(t *testing.T) {
	e := newStoreEnv(t)
	queue := persistence.QueueName{Tenant: "globex", Name: "ledger"}
	push := items("ledger", "p", "1", "a", "b", "c")
	for i := range push {
		push[i].Queue = queue
	}
	pid := e.push(push...)[0].PartitionID
	res, lease := e.pop(persistence.PopRequest{Queue: queue, Partition: "p", Batch: 3})
	if !slices.Equal(txIDs(res.Messages), []string{"a", "b", "c"}) {
		t.Fatalf("pop delivered %v", txIDs(res.Messages))
	}
	if found, err := e.s.DeleteMessage(e.ctx, pid, "b"); err != nil || !found {
		t.Fatalf("delete b: %v, %v", found, err)
	}
	ack := func(tx, tenant string) persistence.AckItem {
		return persistence.AckItem{PartitionID: pid, TransactionID: tx, Group: persistence.QueueMode, LeaseID: lease,
			Status: persistence.AckCompleted, Scope: persistence.Scope{Tenant: tenant}}
	}
	got := e.ack(ack("a", "acme"), ack("b", "globex"), ack("a", "globex"), ack("c", "globex"))
	want := []persistence.AckResult{
		{Error: persistence.ErrMessageNotFound},
		{Error: persistence.ErrMessageNotFound, Queue: queue, PartitionName: "p"},
		{Success: true, Queue: queue, PartitionName: "p"},
		{Success: true, Queue: queue, PartitionName: "p", LeaseReleased: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("acks answered %+v, want %+v", got, want)
	}
	e.checkConsumer(pid, persistence.QueueMode, lease, consumerRow{Cursor: 3, Consumed: 3, Batches: 1})
}

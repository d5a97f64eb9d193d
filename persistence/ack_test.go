package persistence_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

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

// The statements that lock and write consumer rows by (partition, group) pairs read only those
// rows on a generic plan made while the queue had one partition and one cursor: the plan is
// kept by the connection after the tables have grown.
func TestCursorStatementsPlannedOnOneRowReadByKey(t *testing.T) {
	const partitions, n = 2000, 10
	e := newStoreEnv(t)
	e.push(items("q", "p0000", "1", "first")...)
	e.pop(persistence.PopRequest{Queue: persistence.QueueName{Name: "q"}, Batch: 1, AutoAck: true})
	const group = "__QUEUE_MODE__"
	ids := func(names ...string) string {
		var out []string
		for _, name := range names {
			var id uuid.UUID
			if err := e.pool.QueryRow(e.ctx, `SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
				WHERE q.name = 'q' AND p.name = $1`, name).Scan(&id); err != nil {
				t.Fatal(err)
			}
			out = append(out, "'"+id.String()+"'")
		}
		return "ARRAY[" + strings.Join(out, ", ") + "]::uuid[]"
	}
	repeat := func(v string, k int) string { return fmt.Sprintf("array_fill(%s, ARRAY[%d])", v, k) }
	lease := "'" + uuid.NewString() + "'::uuid"
	statements := map[string]struct {
		sql  string
		args func(pids string, k int) string
	}{
		"lock": {persistence.AckLockSQL, func(pids string, k int) string {
			return pids + ", " + repeat("'"+group+"'::text", k)
		}},
		"ack_update": {persistence.AckUpdateSQL, func(pids string, k int) string {
			return fmt.Sprintf("%s, %s, %s, %s, %s, %s, %s", pids, repeat("'"+group+"'::text", k), repeat("1::int8", k),
				repeat("0::int8", k), repeat("0::int8", k), repeat("false", k), repeat("0", k))
		}},
		"leased_update": {persistence.LeasedUpdateSQL, func(pids string, k int) string {
			return fmt.Sprintf("%s, %s, %s, %s, %s", pids, repeat("1::int8", k), repeat("1", k), repeat("'"+group+"'::text", k), lease)
		}},
		"leased_update_one": {persistence.LeasedUpdateOneSQL, func(pids string, k int) string {
			return fmt.Sprintf("(%s)[1], 1, 1, '%s', %s", pids, group, lease)
		}},
		"release": {persistence.ReleaseLeasesSQL, func(pids string, k int) string {
			return fmt.Sprintf("%s, '%s', %s", pids, group, lease)
		}},
		"ack_leased": {persistence.AckLeasedSQL, func(pids string, k int) string {
			return fmt.Sprintf("%s, %s, %s, %s", pids, repeat("'"+group+"'::text", k), repeat(lease, k), repeat("1::int8", k))
		}},
	}
	conns := map[string]*pgxpool.Conn{}
	for name, st := range statements {
		conns[name] = e.prepareOnBrokerConn(name, st.sql)
		explainReads(t, e, conns[name], "EXECUTE "+name+"("+st.args(ids("p0000"), 1)+")", nil, persistence.KeyedPlans) // makes the plan
	}

	names := e.fillPartitions("q", partitions, 1)
	e.exec(`INSERT INTO queen.partition_consumers (partition_id, consumer_group)
		SELECT p.id, g FROM queen.partitions p, unnest(ARRAY['__QUEUE_MODE__', 'g1', 'g2']) g
		ON CONFLICT DO NOTHING`)
	var some []string
	for i := range n {
		some = append(some, names[i*partitions/n])
	}
	pids := ids(some...)
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			e.exec(`ANALYZE queen.partition_consumers`)
		}
		for name, st := range statements {
			read := explainReads(t, e, conns[name], "EXECUTE "+name+"("+st.args(pids, n)+")", nil, persistence.KeyedPlans)
			if read["partition_consumers"] > 2*n {
				t.Errorf("analyzed %v: %s of %d cursors read %d of %d", analyzed, name, n, read["partition_consumers"], 3*partitions)
			}
		}
	}
}

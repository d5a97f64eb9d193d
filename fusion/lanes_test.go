package fusion_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"queen/fusion"
	"queen/persistence"
	"queen/pg/pgtest"
)

// A push spanning many partitions is split over the lanes and answered once, in item order.
func TestPushLanesKeepItemOrder(t *testing.T) {
	pool, _ := pgtest.NewPool(t)
	store := persistence.NewStore(pool)
	lanes := fusion.NewLanes(fusion.Options{MaxItems: 100, InFlight: 4}, store.Push, persistence.IsUnavailable, persistence.PushLaneKey)
	defer lanes.Close()

	items := make([]persistence.PushItem, 40)
	for i := range items {
		items[i] = persistence.PushItem{Queue: persistence.QueueName{Name: "lanes"}, Partition: fmt.Sprintf("p%d", i%10),
			TransactionID: fmt.Sprintf("tx-%d", i), Payload: json.RawMessage(fmt.Sprint(i))}
	}
	done := make(chan []persistence.PushResult, 1)
	if !lanes.TrySubmit(fusion.Job[persistence.PushItem, persistence.PushResult]{Items: items, Done: func(r []persistence.PushResult, err error) {
		if err != nil {
			t.Error(err)
		}
		done <- r
	}}) {
		t.Fatal("empty lanes refused a push")
	}
	res := <-done
	if len(res) != len(items) {
		t.Fatalf("%d results for %d items", len(res), len(items))
	}
	for i, r := range res {
		var part, tx string
		err := pool.QueryRow(context.Background(), `SELECT p.name, m.transaction_id FROM queen.messages m
			JOIN queen.partitions p ON p.id = m.partition_id WHERE m.id = $1`, r.MessageID).Scan(&part, &tx)
		if err != nil || r.Status != persistence.StatusQueued || part != items[i].Partition || tx != items[i].TransactionID {
			t.Fatalf("result %d: %+v names %s/%s (%v), want %s/%s", i, r, part, tx, err, items[i].Partition, items[i].TransactionID)
		}
	}
}

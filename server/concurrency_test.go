package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"queen/pg/pgtest"
	"queen/server/servertest"
)

// TestTwoBrokersConcurrentPushersAndGroups pushes from 16 concurrent producers through two
// brokers sharing one database (8 into one hot partition, 8 spread over 50 partitions) while
// three consumer groups and queue mode consume through both brokers. Every group must receive
// every message exactly once, and per partition in commit order (the database's sequence
// order), which also keeps each producer's own messages in the order it pushed them.
func TestTwoBrokersConcurrentPushersAndGroups(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	brokers := []*servertest.Client{servertest.Start(t, db), servertest.Start(t, db)}
	const (
		queue     = "conc"
		pushers   = 16
		requests  = 25
		perReq    = 5
		consumers = 3
	)
	total := pushers * requests * perReq
	groups := []string{"", "g1", "g2", "g3"}

	type delivery struct {
		id, partition string
		w, n          int
	}
	var mu sync.Mutex
	got := map[string][]delivery{} // group -> deliveries in delivery order
	pushDone := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var consumersWG sync.WaitGroup
	for _, g := range groups {
		for k := 0; k < consumers; k++ {
			consumersWG.Add(1)
			go func(g string, c *servertest.Client) {
				defer consumersWG.Done()
				for ctx.Err() == nil {
					mu.Lock()
					n := len(got[g])
					mu.Unlock()
					if n >= total {
						return
					}
					var p popResponse
					status, body := c.Do("GET", "/api/v1/pop/queue/"+queue+"?wait=true&timeout=500&batch=20&consumerGroup="+g, nil)
					if status != 200 || json.Unmarshal(body, &p) != nil {
						t.Errorf("pop %q: %d %s", g, status, body)
						return
					}
					if len(p.Messages) == 0 {
						continue
					}
					// Record before acking: the next batch of this partition can only be
					// delivered after the ack, so the record order is the delivery order.
					mu.Lock()
					for _, m := range p.Messages {
						var d struct{ W, N int }
						_ = json.Unmarshal(m.Data, &d)
						got[g] = append(got[g], delivery{m.ID, m.Partition, d.W, d.N})
					}
					mu.Unlock()
					for _, r := range ackAll(t, c, g, p.Messages) {
						if !r.Success {
							t.Errorf("ack %q: %+v", g, r)
						}
					}
				}
			}(g, brokers[k%2])
		}
	}

	var pushersWG sync.WaitGroup
	for w := 0; w < pushers; w++ {
		pushersWG.Add(1)
		go func(w int) {
			defer pushersWG.Done()
			c := brokers[w%2]
			n := 0
			for r := 0; r < requests; r++ {
				partition := "hot"
				if w >= pushers/2 {
					partition = fmt.Sprintf("p%d", (w*requests+r)%50)
				}
				items := make([]item, perReq)
				for i := range items {
					items[i] = item{"queue": queue, "partition": partition, "payload": map[string]int{"w": w, "n": n}}
					n++
				}
				for _, res := range push(t, c, items...) {
					if res.Status != "queued" {
						t.Errorf("push: %+v", res)
					}
				}
			}
		}(w)
	}
	pushersWG.Wait()
	close(pushDone)
	consumersWG.Wait()
	if ctx.Err() != nil {
		t.Fatalf("consumers did not finish: %v", ctx.Err())
	}

	// Commit order per partition, from the database.
	rows, err := brokers[0].Broker.Store().Pool().Query(context.Background(),
		`SELECT m.id::text, p.name FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id ORDER BY p.name, m.seq`)
	if err != nil {
		t.Fatal(err)
	}
	commit := map[string][]string{}
	stored := 0
	for rows.Next() {
		var id, part string
		if err := rows.Scan(&id, &part); err != nil {
			t.Fatal(err)
		}
		commit[part] = append(commit[part], id)
		stored++
	}
	rows.Close()
	if stored != total {
		t.Fatalf("stored %d messages, pushed %d", stored, total)
	}

	for _, g := range groups {
		ds := got[g]
		if len(ds) != total {
			t.Errorf("group %q: %d deliveries, want %d", g, len(ds), total)
		}
		seen := map[string]bool{}
		byPart := map[string][]string{}
		lastN := map[[2]any]int{}
		for _, d := range ds {
			if seen[d.id] {
				t.Errorf("group %q: message %s delivered twice", g, d.id)
			}
			seen[d.id] = true
			byPart[d.partition] = append(byPart[d.partition], d.id)
			key := [2]any{d.partition, d.w}
			if prev, ok := lastN[key]; ok && d.n <= prev {
				t.Errorf("group %q: producer %d's message %d arrived after %d in %s", g, d.w, d.n, prev, d.partition)
			}
			lastN[key] = d.n
		}
		for part, ids := range commit {
			if !slices.Equal(byPart[part], ids) {
				t.Errorf("group %q partition %s: delivery order differs from commit order (%d vs %d messages)", g, part, len(byPart[part]), len(ids))
			}
		}
	}
}

package server_test

import (
	"context"
	"sync"
	"testing"

	"queen/pg/pgtest"
	"queen/server/servertest"
)

func exec(t *testing.T, c *servertest.Client, sql string, args ...any) {
	t.Helper()
	if _, err := c.Broker.Store().Pool().Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestConcurrentDuplicatePushesHaveOneWinner(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	brokers := []*servertest.Client{servertest.Start(t, db), servertest.Start(t, db)}
	const racers = 16
	results := make([]pushResult, racers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < racers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			results[i] = push(t, brokers[i%2], item{"queue": "idem", "partition": "p", "payload": i, "transactionId": "same-tx"})[0]
		}(i)
	}
	close(start)
	wg.Wait()
	queued, winner := 0, ""
	for _, r := range results {
		if r.Status == "queued" {
			queued++
			winner = r.MessageID
		}
	}
	if queued != 1 {
		t.Fatalf("%d pushes were queued, want exactly one: %+v", queued, results)
	}
	for _, r := range results {
		if r.MessageID != winner || (r.Status != "queued" && r.Status != "duplicate") {
			t.Fatalf("every racer must report the winner's id %s: %+v", winner, r)
		}
	}
	var rows int
	_ = brokers[0].Broker.Store().Pool().QueryRow(context.Background(), `SELECT count(*) FROM queen.messages`).Scan(&rows)
	if rows != 1 {
		t.Fatalf("%d rows stored", rows)
	}
	// Duplicates inside one request: the first occurrence wins.
	res := push(t, brokers[0], item{"queue": "idem", "partition": "q", "payload": 1, "transactionId": "twice"},
		item{"queue": "idem", "partition": "q", "payload": 2, "transactionId": "twice"})
	if res[0].Status != "queued" || res[1].Status != "duplicate" || res[1].MessageID != res[0].MessageID {
		t.Fatalf("in-request duplicate: %+v", res)
	}
}

func TestDelayedProcessingHidesYoungMessages(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	push(t, c, item{"queue": "delayed", "payload": "first"})
	exec(t, c, `UPDATE queen.queues SET delayed_processing = 3600 WHERE name = 'delayed'`)
	push(t, c, item{"queue": "delayed", "payload": "second"})
	// Both are younger than an hour: nothing is visible.
	if p := pop(t, c, "/api/v1/pop/queue/delayed", "batch", "10"); len(p.Messages) != 0 {
		t.Fatalf("young messages delivered: %+v", p)
	}
	// Age only the first: it is delivered, the second stays hidden (FIFO cut).
	exec(t, c, `UPDATE queen.segments SET created_at = now() - interval '2 hours' WHERE payloads[1] = '"first"'`)
	p := pop(t, c, "/api/v1/pop/queue/delayed", "batch", "10", "autoAck", "true")
	if len(p.Messages) != 1 || string(p.Messages[0].Data) != `"first"` {
		t.Fatalf("aged message: %+v", p)
	}
	exec(t, c, `UPDATE queen.segments SET created_at = now() - interval '2 hours'`)
	p = pop(t, c, "/api/v1/pop/queue/delayed", "batch", "10", "autoAck", "true")
	if len(p.Messages) != 1 || string(p.Messages[0].Data) != `"second"` {
		t.Fatalf("second message: %+v", p)
	}
}

func TestWindowBufferWaitsForAQuietPartition(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	push(t, c, item{"queue": "win", "payload": 1})
	exec(t, c, `UPDATE queen.queues SET window_buffer = 3600 WHERE name = 'win'`)
	push(t, c, item{"queue": "win", "payload": 2})
	if p := pop(t, c, "/api/v1/pop/queue/win", "batch", "10"); p.Error != "no_available_partition" {
		t.Fatalf("wildcard pop during the window: %+v", p)
	}
	var w map[string]any
	c.JSON("GET", "/api/v1/pop/queue/win/partition/Default", nil, 200, &w)
	if w["windowBufferActive"] != true || w["success"] != true || len(w["messages"].([]any)) != 0 {
		t.Fatalf("partition pop during the window: %v", w)
	}
	exec(t, c, `UPDATE queen.partitions SET last_message_at = now() - interval '2 hours'`)
	p := pop(t, c, "/api/v1/pop/queue/win", "batch", "10", "autoAck", "true")
	if len(p.Messages) != 2 {
		t.Fatalf("after the window: %+v", p)
	}
}

func TestPopByNamespace(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	// Namespace and task derive from the queue name: billing.invoices -> billing / invoices.
	push(t, c, item{"queue": "billing.invoices", "payload": "inv"}, item{"queue": "shipping.labels", "payload": "lbl"})
	p := pop(t, c, "/api/v1/pop", "namespace", "billing", "autoAck", "true")
	if len(p.Messages) != 1 || string(p.Messages[0].Data) != `"inv"` || p.Queue != "billing.invoices" {
		t.Fatalf("namespace pop: %+v", p)
	}
	p = pop(t, c, "/api/v1/pop", "task", "labels", "autoAck", "true")
	if len(p.Messages) != 1 || string(p.Messages[0].Data) != `"lbl"` {
		t.Fatalf("task pop: %+v", p)
	}
	if p = pop(t, c, "/api/v1/pop", "namespace", "billing"); p.Error != "no_available_partition" {
		t.Fatalf("drained namespace: %+v", p)
	}
}

package server_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"queen/config"
)

func TestPushPopAckLifecycle(t *testing.T) {
	t.Parallel()
	c := startBroker(t)

	res := push(t, c,
		item{"queue": "orders", "partition": "p1", "payload": map[string]any{"n": 1}, "transactionId": "tx-1"},
		item{"queue": "orders", "partition": "p1", "payload": map[string]any{"n": 2}, "transactionId": "tx-2", "traceId": "11111111-2222-3333-4444-555555555555"},
		item{"queue": "orders", "partition": "p2", "payload": map[string]any{"n": 3}},
	)
	for i, r := range res {
		if r.Index != i || r.Status != "queued" || r.QueueName != "orders" || r.MessageID == "" || r.PartitionID == nil {
			t.Fatalf("push result %d: %+v", i, r)
		}
	}
	if *res[0].PartitionID != *res[1].PartitionID || *res[0].PartitionID == *res[2].PartitionID {
		t.Fatalf("p1 items must share a partition id, p2 must differ: %+v", res)
	}
	if res[0].TransactionID != "tx-1" || res[2].TransactionID == "" {
		t.Fatalf("transaction ids: %+v", res)
	}
	if str(res[1].TraceID) != "11111111-2222-3333-4444-555555555555" || res[0].TraceID != nil {
		t.Fatalf("trace ids: %+v", res)
	}

	// A repeated transactionId answers duplicate with the original id and no partition_id.
	status, raw := c.Do("POST", "/api/v1/push", map[string]any{"items": []item{{"queue": "orders", "partition": "p1", "payload": 9, "transactionId": "tx-1"}}})
	var dup []map[string]any
	if err := json.Unmarshal(raw, &dup); status != 200 || err != nil {
		t.Fatalf("duplicate push: %d %s", status, raw)
	}
	if dup[0]["status"] != "duplicate" || dup[0]["message_id"] != res[0].MessageID {
		t.Fatalf("duplicate: %s", raw)
	}
	if _, ok := dup[0]["partition_id"]; ok {
		t.Fatalf("duplicate must not carry partition_id: %s", raw)
	}

	// Specific partition pop: both p1 messages, in order, one lease.
	p := pop(t, c, "/api/v1/pop/queue/orders/partition/p1", "batch", "10")
	if !p.Success || len(p.Messages) != 2 || p.PartitionsClaimed != 1 || p.Partition != "p1" {
		t.Fatalf("pop p1: %+v", p)
	}
	if got := payloads(p.Messages); !slices.Equal(got, []string{`{"n":1}`, `{"n":2}`}) {
		t.Fatalf("pop p1 payloads: %v", got)
	}
	lease := str(p.LeaseID)
	for _, m := range p.Messages {
		if m.LeaseID != lease || m.ConsumerGroup != "__QUEUE_MODE__" || m.PartitionID != *res[0].PartitionID || !strings.HasSuffix(m.CreatedAt, "Z") || len(m.CreatedAt) != len("2026-11-29T18:33:15.883670Z") {
			t.Fatalf("message fields: %+v (lease %s)", m, lease)
		}
	}
	if p.Messages[1].TraceID == nil || p.Messages[0].TraceID != nil {
		t.Fatalf("traceId on pop: %+v", p.Messages)
	}

	// The partition is leased: a second pop of it answers lease_held.
	if again := pop(t, c, "/api/v1/pop/queue/orders/partition/p1"); again.Success || again.Error != "lease_held" || again.Messages == nil {
		t.Fatalf("leased partition: %+v", again)
	}

	a := ack(t, c, map[string]any{"transactionId": "tx-1", "partitionId": p.Messages[0].PartitionID, "leaseId": lease, "status": "completed"})
	if !a.Success || a.LeaseReleased || str(a.QueueName) != "orders" || str(a.PartitionName) != "p1" || a.Error != nil {
		t.Fatalf("ack tx-1: %+v", a)
	}
	a = ack(t, c, map[string]any{"transactionId": "tx-2", "partitionId": p.Messages[0].PartitionID, "leaseId": lease})
	if !a.Success || !a.LeaseReleased {
		t.Fatalf("ack tx-2 must release the lease: %+v", a)
	}
	a = ack(t, c, map[string]any{"transactionId": "tx-2", "partitionId": p.Messages[0].PartitionID, "leaseId": lease})
	if a.Success || str(a.Error) != "Invalid or expired lease" {
		t.Fatalf("second ack: %+v", a)
	}
	a = ack(t, c, map[string]any{"transactionId": "nope", "partitionId": p.Messages[0].PartitionID})
	if a.Success || str(a.Error) != "Message not found" || str(a.PartitionName) != "p1" {
		t.Fatalf("unknown ack: %+v", a)
	}

	// p1 is consumed; the wildcard pop finds p2 next, then nothing.
	p = pop(t, c, "/api/v1/pop/queue/orders", "batch", "10", "autoAck", "true")
	if len(p.Messages) != 1 || string(p.Messages[0].Data) != `{"n":3}` || str(p.LeaseID) != "" || p.Messages[0].LeaseID != "" {
		t.Fatalf("autoAck pop of p2: %+v", p)
	}
	empty := pop(t, c, "/api/v1/pop/queue/orders", "batch", "10")
	if empty.Success || empty.Error != "no_available_partition" || empty.Messages == nil {
		t.Fatalf("empty pop: %+v", empty)
	}
	if r := pop(t, c, "/api/v1/pop/queue/orders/partition/zzz"); r.Error != "partition_not_found" {
		t.Fatalf("unknown partition: %+v", r)
	}
	if r := pop(t, c, "/api/v1/pop/queue/nosuchq"); r.Error != "no_available_partition" {
		t.Fatalf("unknown queue: %+v", r)
	}
}

func TestFailedAcksRetryThenDeadLetter(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	push(t, c, item{"queue": "work", "payload": map[string]any{"job": 1}, "transactionId": "j1"},
		item{"queue": "work", "payload": map[string]any{"job": 2}, "transactionId": "j2"})

	// retryLimit is 3 by default: three failures are retried, the fourth dead-letters.
	for attempt := 1; attempt <= 4; attempt++ {
		p := pop(t, c, "/api/v1/pop/queue/work", "batch", "10")
		if len(p.Messages) != 2 || p.Messages[0].TransactionID != "j1" {
			t.Fatalf("attempt %d: the failed batch must come back whole and in order: %+v", attempt, p)
		}
		a := ack(t, c, map[string]any{"transactionId": "j1", "partitionId": p.Messages[0].PartitionID,
			"leaseId": *p.LeaseID, "status": "failed", "error": "boom"})
		if !a.Success || a.DLQ != (attempt == 4) {
			t.Fatalf("attempt %d: %+v", attempt, a)
		}
		if attempt == 4 {
			// j2 is still leased; acking it completes the batch.
			a = ack(t, c, map[string]any{"transactionId": "j2", "partitionId": p.Messages[0].PartitionID, "leaseId": *p.LeaseID})
			if !a.Success || !a.LeaseReleased {
				t.Fatalf("ack j2: %+v", a)
			}
		}
	}
	if p := pop(t, c, "/api/v1/pop/queue/work"); len(p.Messages) != 0 {
		t.Fatalf("after the DLQ nothing is left: %+v", p)
	}
	var reason string
	var retries int
	err := c.Broker.Store().Pool().QueryRow(context.Background(), `
		SELECT d.error_message, d.retry_count FROM queen.dead_letter_queue d
		JOIN queen.messages m ON m.partition_id = d.partition_id AND m.seq = d.message_seq
		WHERE m.transaction_id = 'j1'`).Scan(&reason, &retries)
	if err != nil || reason != "boom" || retries != 3 {
		t.Fatalf("dead letter row: %q %d %v", reason, retries, err)
	}
}

func TestExpiredLeaseRedelivers(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	push(t, c, item{"queue": "exp", "payload": "a"}, item{"queue": "exp", "payload": "b"})
	first := pop(t, c, "/api/v1/pop/queue/exp", "batch", "10")
	if len(first.Messages) != 2 {
		t.Fatalf("first pop: %+v", first)
	}
	if r := pop(t, c, "/api/v1/pop/queue/exp"); len(r.Messages) != 0 {
		t.Fatalf("leased: %+v", r)
	}
	// Expire the lease as the clock would.
	_, err := c.Broker.Store().Pool().Exec(context.Background(),
		`UPDATE queen.partition_consumers SET lease_expires_at = now() - interval '1 second'`)
	if err != nil {
		t.Fatal(err)
	}
	second := pop(t, c, "/api/v1/pop/queue/exp", "batch", "10")
	if !slices.Equal(payloads(second.Messages), []string{`"a"`, `"b"`}) || str(second.LeaseID) == str(first.LeaseID) {
		t.Fatalf("redelivery after expiry: %+v", second)
	}
	// The old lease no longer acks.
	a := ack(t, c, map[string]any{"transactionId": first.Messages[0].TransactionID, "partitionId": first.Messages[0].PartitionID, "leaseId": *first.LeaseID})
	if a.Success || str(a.Error) != "Invalid or expired lease" {
		t.Fatalf("ack with the expired lease: %+v", a)
	}
	if out := ackAll(t, c, "", second.Messages); !out[1].LeaseReleased {
		t.Fatalf("ack with the new lease: %+v", out)
	}
}

func TestConsumerGroupsAndSubscriptionModes(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	push(t, c, item{"queue": "events", "partition": "e1", "payload": 1}, item{"queue": "events", "partition": "e1", "payload": 2},
		item{"queue": "events", "partition": "e2", "payload": 3})

	// Every group sees every message, and queue mode is independent of groups.
	for _, g := range []string{"groupA", "groupB", ""} {
		var got []string
		for {
			p := pop(t, c, "/api/v1/pop/queue/events", "consumerGroup", g, "batch", "10", "autoAck", "true")
			if len(p.Messages) == 0 {
				break
			}
			want := g
			if want == "" {
				want = "__QUEUE_MODE__"
			}
			if p.ConsumerGroup != want || p.Messages[0].ConsumerGroup != want {
				t.Fatalf("group %q: %+v", g, p)
			}
			got = append(got, payloads(p.Messages)...)
		}
		slices.Sort(got)
		if !slices.Equal(got, []string{"1", "2", "3"}) {
			t.Fatalf("group %q got %v", g, got)
		}
	}

	// A new group with subscriptionMode=new skips history and gets what comes after.
	if p := pop(t, c, "/api/v1/pop/queue/events", "consumerGroup", "late", "subscriptionMode", "new", "batch", "10"); len(p.Messages) != 0 {
		t.Fatalf("new group must not see history: %+v", p)
	}
	push(t, c, item{"queue": "events", "partition": "e1", "payload": 4}, item{"queue": "events", "partition": "e3", "payload": 5})
	var got []string
	for {
		p := pop(t, c, "/api/v1/pop/queue/events", "consumerGroup", "late", "batch", "10", "autoAck", "true")
		if len(p.Messages) == 0 {
			break
		}
		got = append(got, payloads(p.Messages)...)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"4", "5"}) {
		t.Fatalf("new group got %v, want the two later messages", got)
	}

	// partitions=2 claims two partitions under one lease.
	// Which two of e1 (3 messages), e2 and e3 (1 each) is up to the broker; each comes whole.
	p := pop(t, c, "/api/v1/pop/queue/events", "consumerGroup", "multi", "batch", "10", "partitions", "2")
	perPartition := map[string]int{}
	for _, m := range p.Messages {
		if m.LeaseID != *p.LeaseID {
			t.Fatalf("one lease for all partitions: %+v", p)
		}
		perPartition[m.Partition]++
	}
	want := map[string]int{"e1": 3, "e2": 1, "e3": 1}
	if p.PartitionsClaimed != 2 || len(perPartition) != 2 {
		t.Fatalf("multi-partition pop: %+v", p)
	}
	for part, n := range perPartition {
		if want[part] != n {
			t.Fatalf("partition %s delivered %d of its %d messages", part, n, want[part])
		}
	}
}

// An ack without a leaseId cannot move a cursor while another consumer's lease is in force: it
// is refused as a wrong leaseId is, and the lease holder's acks and the next pop are unaffected.
// With no lease in force an ack without a leaseId still applies.
func TestAckWithoutLeaseIDUnderAnotherLease(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	push(t, c, item{"queue": "held", "payload": map[string]any{"n": 1}, "transactionId": "tx-1"},
		item{"queue": "held", "payload": map[string]any{"n": 2}, "transactionId": "tx-2"},
		item{"queue": "held", "payload": map[string]any{"n": 3}, "transactionId": "tx-3"})
	p := pop(t, c, "/api/v1/pop/queue/held", "batch", "2")
	if len(p.Messages) != 2 || p.LeaseID == nil {
		t.Fatalf("holder's pop: %s", fmtJSON(p))
	}
	pid, lease := p.Messages[0].PartitionID, *p.LeaseID

	for _, status := range []string{"completed", "retry", "failed", "dlq"} {
		a := ack(t, c, map[string]any{"transactionId": "tx-2", "partitionId": pid, "status": status})
		if a.Success || str(a.Error) != "Invalid or expired lease" || a.LeaseReleased || a.DLQ {
			t.Errorf("%s ack without leaseId under another lease: %s", status, fmtJSON(a))
		}
	}
	batch := ackAll(t, c, "", []message{{TransactionID: "tx-2", PartitionID: pid}})
	if batch[0].Success || str(batch[0].Error) != "Invalid or expired lease" {
		t.Errorf("batch ack without leaseId under another lease: %s", fmtJSON(batch))
	}

	// The cursor has not moved: the holder's first ack keeps its lease, the second ends it.
	if a := ack(t, c, map[string]any{"transactionId": "tx-1", "partitionId": pid, "leaseId": lease}); !a.Success || a.LeaseReleased {
		t.Fatalf("holder's ack of tx-1: %s", fmtJSON(a))
	}
	if a := ack(t, c, map[string]any{"transactionId": "tx-2", "partitionId": pid, "leaseId": lease}); !a.Success || !a.LeaseReleased {
		t.Fatalf("holder's ack of tx-2: %s", fmtJSON(a))
	}
	if next := pop(t, c, "/api/v1/pop/queue/held", "batch", "10", "autoAck", "true"); !slices.Equal(payloads(next.Messages), []string{`{"n":3}`}) {
		t.Fatalf("next pop: %s", fmtJSON(next))
	}

	// No lease in force: an ack without leaseId applies (an ack without a pop).
	push(t, c, item{"queue": "held", "payload": map[string]any{"n": 4}, "transactionId": "tx-4"})
	if a := ack(t, c, map[string]any{"transactionId": "tx-4", "partitionId": pid}); !a.Success {
		t.Fatalf("ack without leaseId and no lease: %s", fmtJSON(a))
	}
	if next := pop(t, c, "/api/v1/pop/queue/held", "batch", "10"); len(next.Messages) != 0 {
		t.Fatalf("pop after the lease-free ack: %s", fmtJSON(next))
	}
}

func TestTransactionIsAtomic(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	push(t, c, item{"queue": "txsrc", "payload": map[string]any{"step": 1}, "transactionId": "src-1"})
	p := pop(t, c, "/api/v1/pop/queue/txsrc")
	src := p.Messages[0]

	type txResp struct {
		Error         string           `json:"error"`
		Results       []map[string]any `json:"results"`
		Success       bool             `json:"success"`
		TransactionID string           `json:"transactionId"`
	}
	var ok txResp
	c.JSON("POST", "/api/v1/transaction", map[string]any{"operations": []any{
		map[string]any{"type": "ack", "transactionId": "src-1", "partitionId": src.PartitionID, "leaseId": src.LeaseID, "status": "completed"},
		map[string]any{"type": "push", "items": []item{{"queue": "txdst", "payload": map[string]any{"processed": true}}}},
	}}, 200, &ok)
	if !ok.Success || len(ok.Results) != 2 || ok.Results[0]["type"] != "ack" || ok.Results[1]["type"] != "push" || ok.Results[1]["messageId"] == "" || ok.TransactionID == "" {
		t.Fatalf("transaction: %+v", ok)
	}

	// A failing ack rolls the push back.
	var bad txResp
	c.JSON("POST", "/api/v1/transaction", map[string]any{"operations": []any{
		map[string]any{"type": "push", "items": []item{{"queue": "txdst", "payload": "must not exist"}}},
		map[string]any{"type": "ack", "transactionId": "no-such-tx", "partitionId": src.PartitionID},
	}}, 200, &bad)
	if bad.Success || bad.Error != "ACK operation failed: Message not found" {
		t.Fatalf("failing transaction: %+v", bad)
	}
	d := pop(t, c, "/api/v1/pop/queue/txdst", "batch", "10", "autoAck", "true")
	if !slices.Equal(payloads(d.Messages), []string{`{"processed":true}`}) {
		t.Fatalf("txdst must hold only the committed push: %+v", d)
	}
	if r := pop(t, c, "/api/v1/pop/queue/txsrc"); len(r.Messages) != 0 {
		t.Fatalf("the source message was acked by the transaction: %+v", r)
	}
	c.JSON("POST", "/api/v1/transaction", map[string]any{"operations": []any{}}, 400, nil)
}

func TestLeaseExtend(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	push(t, c, item{"queue": "ext", "payload": 1})
	p := pop(t, c, "/api/v1/pop/queue/ext")
	var out []map[string]any
	c.JSON("POST", "/api/v1/lease/"+*p.LeaseID+"/extend", map[string]any{"seconds": 600}, 200, &out)
	if len(out) != 1 || out[0]["success"] != true || out[0]["leaseId"] != *p.LeaseID || out[0]["expiresAt"] == nil || out[0]["error"] != nil {
		t.Fatalf("extend: %v", out)
	}
	c.JSON("POST", "/api/v1/lease/00000000-0000-0000-0000-000000000000/extend", "{}", 200, &out)
	if out[0]["success"] != false || out[0]["error"] != "Lease not found" || out[0]["expiresAt"] != nil {
		t.Fatalf("unknown lease: %v", out)
	}
	// The Python client sends no body: the default applies.
	c.JSON("POST", "/api/v1/lease/"+*p.LeaseID+"/extend", "", 200, &out)
	if len(out) != 1 || out[0]["success"] != true || out[0]["expiresAt"] == nil {
		t.Fatalf("extend without a body: %v", out)
	}
	c.JSON("POST", "/api/v1/lease/"+*p.LeaseID+"/extend", "[]", 400, nil)
}

func TestBadInputIsRejectedWithTheFieldNamed(t *testing.T) {
	t.Parallel()
	c := startBroker(t, func(c *config.Config) { c.MaxBodyBytes = 4096 })
	long := strings.Repeat("x", 256)
	cases := []struct {
		method, path string
		body         any
		status       int
		want         string
	}{
		{"POST", "/api/v1/push", `{"items":[{`, 400, "Invalid JSON"},
		{"POST", "/api/v1/push", ``, 400, "Empty request body"},
		{"POST", "/api/v1/push", `{"foo":1}`, 400, "items array is required"},
		{"POST", "/api/v1/push", `{"items":[{"payload":1}]}`, 400, "items[0].queue"},
		{"POST", "/api/v1/push", `{"items":[{"queue":"` + long + `"}]}`, 400, "items[0].queue must be at most 255"},
		{"POST", "/api/v1/push", `{"items":[{"queue":"q","partition":7}]}`, 400, "items[0].partition must be a string"},
		{"POST", "/api/v1/push", `{"items":[{"queue":"q","payload":"a\u0000b"}]}`, 400, "items[0].payload"},
		{"POST", "/api/v1/push", `{"items":[{"queue":"q","payload":"` + strings.Repeat("y", 5000) + `"}]}`, 413, "QUEEN_MAX_BODY_BYTES"},
		{"GET", "/api/v1/pop/queue/q?batch=-1", nil, 400, "batch"},
		{"GET", "/api/v1/pop/queue/q?batch=abc", nil, 400, "batch"},
		{"GET", "/api/v1/pop/queue/q?timeout=soon", nil, 400, "timeout"},
		{"GET", "/api/v1/pop/queue/q?wait=maybe", nil, 400, "wait"},
		{"GET", "/api/v1/pop/queue/q?subscriptionFrom=yesterday", nil, 400, "subscriptionFrom"},
		{"POST", "/api/v1/ack", `{"transactionId":"t"}`, 400, "partitionId is required"},
		{"POST", "/api/v1/ack", `{"transactionId":"t","partitionId":"not-a-uuid"}`, 400, "partitionId must be a UUID"},
		{"POST", "/api/v1/ack", `{"transactionId":"t","partitionId":"11111111-2222-3333-4444-555555555555","status":"maybe"}`, 400, "status must be one of"},
		{"POST", "/api/v1/ack/batch", `{"acknowledgments":[{"transactionId":"t"}]}`, 400, "acknowledgments[0].partitionId"},
		{"POST", "/api/v1/ack/batch", `{}`, 400, "acknowledgments array is required"},
		{"POST", "/api/v1/transaction", `{"operations":[{"type":"frobnicate"}]}`, 400, "operations[0].type"},
		{"POST", "/api/v1/transaction", `{}`, 400, "operations array required"},
		{"GET", "/api/v1/pop", nil, 400, "namespace or task"},
	}
	for _, tc := range cases {
		status, body := c.Do(tc.method, tc.path, tc.body)
		var e struct{ Error string }
		if status != tc.status || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, tc.want) {
			t.Errorf("%s %s %v: got %d %s, want %d with %q", tc.method, tc.path, tc.body, status, body, tc.status, tc.want)
		}
	}

	// A bad traceId fails that item only; the others are stored.
	res := push(t, c, item{"queue": "mixed", "payload": 1}, item{"queue": "mixed", "payload": 2, "traceId": "not-a-uuid"}, item{"queue": "mixed", "payload": 3})
	if res[0].Status != "queued" || res[1].Status != "failed" || !strings.Contains(res[1].Error, "traceId") || res[2].Status != "queued" {
		t.Fatalf("bad traceId: %+v", res)
	}
	p := pop(t, c, "/api/v1/pop/queue/mixed", "batch", "10", "autoAck", "true")
	if !slices.Equal(payloads(p.Messages), []string{"1", "3"}) {
		t.Fatalf("stored items: %v", payloads(p.Messages))
	}

	// Empty results are JSON, never an empty body.
	if status, body := c.Do("POST", "/api/v1/ack/batch", `{"acknowledgments":[]}`); status != 200 || string(body) != "[]" {
		t.Fatalf("empty ack batch: %d %q", status, body)
	}
	if status, body := c.Do("POST", "/api/v1/push", `{"items":[]}`); status != 201 || string(body) != "[]" {
		t.Fatalf("empty push: %d %q", status, body)
	}
}

func TestPayloadsComeBackEqual(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	values := []string{`{"a":[1,2,{"b":null}]}`, `[1,"two",3.5]`, `"just a string"`, `42`, `null`, `true`, `"snow ☃ and \ud83d\ude00"`}
	items := make([]item, len(values))
	for i, v := range values {
		items[i] = item{"queue": "shapes", "payload": json.RawMessage(v)}
	}
	push(t, c, items...)
	p := pop(t, c, "/api/v1/pop/queue/shapes", "batch", "100", "autoAck", "true")
	if len(p.Messages) != len(values) {
		t.Fatalf("got %d messages", len(p.Messages))
	}
	for i, m := range p.Messages {
		var want, got any
		_ = json.Unmarshal([]byte(values[i]), &want)
		_ = json.Unmarshal(m.Data, &got)
		if fmtJSON(want) != fmtJSON(got) {
			t.Errorf("payload %d: got %s want %s", i, m.Data, values[i])
		}
	}
}

func TestRoutingFallbacks(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	for _, r := range []struct{ method, path string }{{"GET", "/api/v1/nope"}, {"PUT", "/api/v1/push"}, {"POST", "/dashboard"}, {"GET", "/auth/whatever"}} {
		status, body := c.Do(r.method, r.path, nil)
		if status != 404 || string(body) != `{"error":"Not Found","code":"no_such_route"}` {
			t.Errorf("%s %s: %d %s", r.method, r.path, status, body)
		}
	}
	if status, body := c.Do("GET", "/queues/orders", nil); status != 200 || !strings.Contains(string(body), "<html") {
		t.Errorf("dashboard fallback: %d %.60s", status, body)
	}
	if status, _ := c.Do("OPTIONS", "/api/v1/push", nil); status != 204 {
		t.Errorf("preflight: %d", status)
	}
	var h map[string]any
	c.JSON("GET", "/health", nil, 200, &h)
	if h["status"] != "healthy" || h["database"] != "connected" {
		t.Errorf("health: %v", h)
	}
}

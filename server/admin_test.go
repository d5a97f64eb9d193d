package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"queen/config"
	"queen/pg/pgtest"
	"queen/server/servertest"
)

// The admin tests use their own small helpers (adm*) so they do not depend on the other route
// tests' helpers.

const admServerID = "admin-test-node"

func admStart(t *testing.T) *servertest.Client {
	t.Helper()
	return servertest.Start(t, pgtest.NewDatabase(t), func(c *config.Config) { c.ServerID = admServerID })
}

type admPushed struct {
	MessageID     string  `json:"message_id"`
	PartitionID   *string `json:"partition_id"`
	Status        string  `json:"status"`
	TransactionID string  `json:"transaction_id"`
}

// admPush pushes items (queue, partition, payload, transactionId maps) in one request.
func admPush(t *testing.T, c *servertest.Client, items ...map[string]any) []admPushed {
	t.Helper()
	var out []admPushed
	c.JSON("POST", "/api/v1/push", map[string]any{"items": items}, 200, &out)
	if len(out) != len(items) {
		t.Fatalf("push: %d results for %d items", len(out), len(items))
	}
	for _, r := range out {
		if r.Status != "queued" || r.PartitionID == nil {
			t.Fatalf("push: %+v", out)
		}
	}
	return out
}

type admMessage struct {
	CreatedAt     string          `json:"createdAt"`
	Data          json.RawMessage `json:"data"`
	LeaseID       string          `json:"leaseId"`
	PartitionID   string          `json:"partitionId"`
	TransactionID string          `json:"transactionId"`
}

type admPopped struct {
	Error    string       `json:"error"`
	LeaseID  *string      `json:"leaseId"`
	Messages []admMessage `json:"messages"`
	Success  bool         `json:"success"`
}

func (p admPopped) txIDs() []string {
	out := make([]string, len(p.Messages))
	for i, m := range p.Messages {
		out[i] = m.TransactionID
	}
	return out
}

// admPop pops from path (a pop route) with query parameters given as pairs.
func admPop(t *testing.T, c *servertest.Client, path string, kv ...string) admPopped {
	t.Helper()
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	var out admPopped
	c.JSON("GET", path+"?"+q.Encode(), nil, 200, &out)
	return out
}

// admAck acknowledges one message and returns its result.
func admAck(t *testing.T, c *servertest.Client, body map[string]any) map[string]any {
	t.Helper()
	var out []map[string]any
	c.JSON("POST", "/api/v1/ack", body, 200, &out)
	if len(out) != 1 || out[0]["success"] != true {
		t.Fatalf("ack %v: %v", body, out)
	}
	return out[0]
}

func admStr(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

var admMsTime = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// admMatch compares a decoded JSON answer with an expectation in which the string "<ms>"
// stands for any admin timestamp (UTC, milliseconds, Z).
func admMatch(got, want any) bool {
	switch w := want.(type) {
	case string:
		if w == "<ms>" {
			g, ok := got.(string)
			return ok && admMsTime.MatchString(g)
		}
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for k, v := range w {
			if gv, ok := g[k]; !ok || !admMatch(gv, v) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !admMatch(g[i], w[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(got, want)
}

// admExpect sends a request, checks the status and compares the JSON answer with want (see
// admMatch). It returns the raw body.
func admExpect(t *testing.T, c *servertest.Client, method, path string, body any, status int, want string) []byte {
	t.Helper()
	gotStatus, raw := c.Do(method, path, body)
	if gotStatus != status {
		t.Fatalf("%s %s: status %d, want %d; body %s", method, path, gotStatus, status, raw)
	}
	var got, exp any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%s %s: cannot decode %s: %v", method, path, raw, err)
	}
	if err := json.Unmarshal([]byte(want), &exp); err != nil {
		t.Fatalf("bad expectation %s: %v", want, err)
	}
	if !admMatch(got, exp) {
		t.Fatalf("%s %s:\n got %s\nwant %s", method, path, raw, want)
	}
	return raw
}

// admDecode sends a request, checks the status and decodes the answer into a generic value.
func admDecode[T any](t *testing.T, c *servertest.Client, method, path string, body any, status int) T {
	t.Helper()
	var out T
	c.JSON(method, path, body, status, &out)
	return out
}

func TestAdminConfigure(t *testing.T) {
	t.Parallel()
	c := admStart(t)

	first := admDecode[map[string]any](t, c, "POST", "/api/v1/configure", map[string]any{
		"queue": "orders", "namespace": "billing", "task": "invoice",
		"options": map[string]any{"leaseTime": 30, "retryLimit": 2, "priority": 5, "dlqAfterMaxRetries": true, "retentionSeconds": 3600, "unknownOption": 1},
	}, 200)
	queueID, partitionID := first["queueId"].(string), first["partitionId"].(string)
	if len(queueID) != 36 || len(partitionID) != 36 {
		t.Fatalf("configure ids: %v", first)
	}
	opts := `{"completedRetentionSeconds":0,"deadLetterQueue":false,"delayedProcessing":0,"dlqAfterMaxRetries":true,"encryptionEnabled":false,"leaseTime":30,"maxSize":0,"maxWaitTimeSeconds":0,"priority":5,"retentionEnabled":false,"retentionSeconds":3600,"retryDelay":1000,"retryLimit":2,"ttl":3600,"windowBuffer":0}`
	// Keys in the reference's (alphabetical) order, byte for byte.
	wantRaw := fmt.Sprintf(`{"configured":true,"namespace":"billing","options":%s,"partitionId":"%s","queue":"orders","queueId":"%s","task":"invoice"}`,
		opts, partitionID, queueID)
	if status, got := c.Do("POST", "/api/v1/configure", map[string]any{
		"queue": "orders", "namespace": "billing", "task": "invoice",
		"options": map[string]any{"leaseTime": 30, "retryLimit": 2, "priority": 5, "dlqAfterMaxRetries": true, "retentionSeconds": 3600},
	}); status != 200 || string(got) != wantRaw {
		t.Fatalf("configure again: %d\n got %s\nwant %s", status, got, wantRaw)
	}

	// A partial configure merges: leaseTime, priority, namespace and task keep their values.
	admExpect(t, c, "POST", "/api/v1/configure", map[string]any{"queue": "orders", "options": map[string]any{"retryLimit": 5}}, 200,
		fmt.Sprintf(`{"configured":true,"namespace":"billing","options":%s,"partitionId":"%s","queue":"orders","queueId":"%s","task":"invoice"}`,
			strings.Replace(opts, `"retryLimit":2`, `"retryLimit":5`, 1), partitionID, queueID))
	// namespace null and task non-string change nothing; a new namespace string does; integer
	// options may come as strings.
	admExpect(t, c, "POST", "/api/v1/configure", map[string]any{
		"queue": "orders", "namespace": nil, "task": 7, "options": map[string]any{"leaseTime": "45", "retryLimit": nil, "encryptionEnabled": true},
	}, 200, fmt.Sprintf(`{"configured":true,"namespace":"billing","options":%s,"partitionId":"%s","queue":"orders","queueId":"%s","task":"invoice"}`,
		strings.NewReplacer(`"retryLimit":2`, `"retryLimit":5`, `"leaseTime":30`, `"leaseTime":45`, `"encryptionEnabled":false`, `"encryptionEnabled":true`).Replace(opts),
		partitionID, queueID))
	admExpect(t, c, "POST", "/api/v1/configure", map[string]any{"queue": "orders", "namespace": "sales", "options": map[string]any{}}, 200,
		fmt.Sprintf(`{"configured":true,"namespace":"sales","options":%s,"partitionId":"%s","queue":"orders","queueId":"%s","task":"invoice"}`,
			strings.NewReplacer(`"retryLimit":2`, `"retryLimit":5`, `"leaseTime":30`, `"leaseTime":45`, `"encryptionEnabled":false`, `"encryptionEnabled":true`).Replace(opts),
			partitionID, queueID))

	// A new queue without options gets the defaults, and namespace/task derived from its name
	// as push derives them.
	created := admDecode[map[string]any](t, c, "POST", "/api/v1/configure", map[string]any{"queue": "shop.checkout.v2"}, 200)
	if created["namespace"] != "shop" || created["task"] != "checkout" || created["queue"] != "shop.checkout.v2" || created["configured"] != true {
		t.Fatalf("defaults: %v", created)
	}
	wantDefaults := map[string]any{
		"completedRetentionSeconds": 0.0, "deadLetterQueue": false, "delayedProcessing": 0.0, "dlqAfterMaxRetries": false,
		"encryptionEnabled": false, "leaseTime": 300.0, "maxSize": 0.0, "maxWaitTimeSeconds": 0.0, "priority": 0.0,
		"retentionEnabled": false, "retentionSeconds": 0.0, "retryDelay": 1000.0, "retryLimit": 3.0, "ttl": 3600.0, "windowBuffer": 0.0,
	}
	if !reflect.DeepEqual(created["options"], wantDefaults) {
		t.Fatalf("default options: %v", created["options"])
	}
	// The Default partition exists: a pop of it finds it (empty) rather than partition_not_found.
	if p := admPop(t, c, "/api/v1/pop/queue/shop.checkout.v2/partition/Default", "batch", "1"); p.Error == "partition_not_found" {
		t.Fatalf("Default partition missing: %+v", p)
	}
	// A queue first created by push keeps its messages and partition when configured.
	pushed := admPush(t, c, map[string]any{"queue": "later", "payload": 1})
	cfg := admDecode[map[string]any](t, c, "POST", "/api/v1/configure", map[string]any{"queue": "later", "options": map[string]any{"retryLimit": 0}}, 200)
	if cfg["partitionId"] != *pushed[0].PartitionID || cfg["namespace"] != "later" || cfg["task"] != "" {
		t.Fatalf("configure after push: %v (pushed %+v)", cfg, pushed)
	}

	for _, tc := range []struct {
		body any
		want string
	}{
		{map[string]any{"options": map[string]any{}}, "queue is required"},
		{map[string]any{"queue": 5}, "queue must be a string"},
		{map[string]any{"queue": strings.Repeat("q", 256)}, "queue must be at most 255 characters"},
		{map[string]any{"queue": "orders", "options": []int{1}}, "options must be an object"},
		{map[string]any{"queue": "orders", "options": map[string]any{"leaseTime": -1}}, "options.leaseTime must be a non-negative integer"},
		{map[string]any{"queue": "orders", "options": map[string]any{"ttl": 1.5}}, "options.ttl must be a non-negative integer"},
		{map[string]any{"queue": "orders", "options": map[string]any{"retryDelay": "abc"}}, "options.retryDelay must be a non-negative integer"},
		{map[string]any{"queue": "orders", "options": map[string]any{"maxSize": 1 << 40}}, "options.maxSize must be a non-negative integer"},
		{map[string]any{"queue": "orders", "options": map[string]any{"retentionEnabled": "true"}}, "options.retentionEnabled must be a boolean"},
	} {
		admExpect(t, c, "POST", "/api/v1/configure", tc.body, 400, fmt.Sprintf(`{"error":%q}`, tc.want))
	}
	// The rejected calls changed nothing.
	again := admDecode[map[string]any](t, c, "POST", "/api/v1/configure", map[string]any{"queue": "orders"}, 200)
	if o := again["options"].(map[string]any); o["leaseTime"] != 45.0 || o["ttl"] != 3600.0 || o["retryLimit"] != 5.0 {
		t.Fatalf("options after rejected calls: %v", o)
	}

	// orders is flagged encryptionEnabled and this broker has no key: its pushes are refused
	// (docs/security.md) until the flag is cleared.
	if status, body := c.Do("POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": "orders", "payload": 1}}}); status != 409 ||
		string(body) != `{"error":"queue orders requires encryption but QUEEN_ENCRYPTION_KEY is not set"}` {
		t.Fatalf("push to an encrypted queue without a key: %d %s", status, body)
	}
	admDecode[map[string]any](t, c, "POST", "/api/v1/configure", map[string]any{"queue": "orders", "options": map[string]any{"encryptionEnabled": false}}, 200)

	// Pops use the merged leaseTime (45 s): the message browser shows the lease's expiry, 45 s
	// after the pop's transaction began, which lies between the two readings of the clock
	// around the request (the expiry is shown in milliseconds: the bounds are widened to them).
	admPush(t, c, map[string]any{"queue": "orders", "payload": 1, "transactionId": "lease-check"})
	before := time.Now()
	admPop(t, c, "/api/v1/pop/queue/orders/partition/Default", "batch", "1")
	after := time.Now()
	detail := admDecode[struct{ LeaseExpiresAt string }](t, c, "GET", "/api/v1/messages/"+partitionID+"/lease-check", nil, 200)
	expires, err := time.Parse(time.RFC3339Nano, detail.LeaseExpiresAt)
	if began := expires.Add(-45 * time.Second); err != nil || began.Before(before.Truncate(time.Millisecond)) || began.After(after.Add(time.Millisecond)) {
		t.Fatalf("lease expiry %q, want 45s after a moment between %v and %v (%v)", detail.LeaseExpiresAt, before, after, err)
	}
}

func TestAdminQueues(t *testing.T) {
	t.Parallel()
	c := admStart(t)

	if status, raw := c.Do("GET", "/api/v1/resources/queues", nil); status != 200 || string(raw) != `{"queues":[]}` {
		t.Fatalf("empty queue list: %d %s", status, raw)
	}
	var items []map[string]any
	for i := 1; i <= 5; i++ {
		items = append(items, map[string]any{"queue": "stats", "payload": i, "transactionId": fmt.Sprintf("d%d", i)})
	}
	items = append(items, map[string]any{"queue": "stats", "partition": "p2", "payload": 6}, map[string]any{"queue": "stats", "partition": "p2", "payload": 7})
	res := admPush(t, c, items...)
	def, p2 := *res[0].PartitionID, *res[5].PartitionID
	other := admDecode[map[string]any](t, c, "POST", "/api/v1/configure", map[string]any{"queue": "other.x"}, 200)

	// Lease three messages of Default, ack the first and dead-letter the second.
	p := admPop(t, c, "/api/v1/pop/queue/stats/partition/Default", "batch", "3")
	if got := p.txIDs(); !slices.Equal(got, []string{"d1", "d2", "d3"}) {
		t.Fatalf("pop: %v", got)
	}
	admAck(t, c, map[string]any{"transactionId": "d1", "partitionId": def, "leaseId": *p.LeaseID, "status": "completed"})
	if r := admAck(t, c, map[string]any{"transactionId": "d2", "partitionId": def, "leaseId": *p.LeaseID, "status": "dlq", "error": "bad"}); r["dlq"] != true {
		t.Fatalf("dlq ack: %v", r)
	}

	// Default: 5 stored, 1 completed, 1 dead-lettered, 1 inside the lease, 2 pending. p2: 2 pending.
	admExpect(t, c, "GET", "/api/v1/resources/queues", nil, 200, fmt.Sprintf(`{"queues":[
		{"createdAt":"<ms>","id":%q,"messages":{"pending":0,"processing":0,"total":0},"name":"other.x","namespace":"other","partitions":1,"task":"x"},
		{"createdAt":"<ms>","id":"%s","messages":{"pending":4,"processing":1,"total":7},"name":"stats","namespace":"stats","partitions":2,"task":""}]}`,
		other["queueId"], admQueueID(t, c, "stats")))

	admExpect(t, c, "GET", "/api/v1/resources/queues/stats", nil, 200, fmt.Sprintf(`{
		"createdAt":"<ms>","id":%q,"name":"stats","namespace":"stats","task":"",
		"options":{"completedRetentionSeconds":0,"deadLetterQueue":false,"delayedProcessing":0,"dlqAfterMaxRetries":false,
			"encryptionEnabled":false,"leaseTime":300,"maxSize":0,"maxWaitTimeSeconds":0,"priority":0,"retentionEnabled":false,
			"retentionSeconds":0,"retryDelay":1000,"retryLimit":3,"ttl":3600,"windowBuffer":0},
		"partitions":[
			{"createdAt":"<ms>","id":%q,"name":"Default","newestMessage":"<ms>","oldestMessage":"<ms>",
			 "stats":{"completed":1,"deadLetter":1,"failed":0,"pending":2,"processing":1,"total":5}},
			{"createdAt":"<ms>","id":%q,"name":"p2","newestMessage":"<ms>","oldestMessage":"<ms>",
			 "stats":{"completed":0,"deadLetter":0,"failed":0,"pending":2,"processing":0,"total":2}}],
		"totals":{"completed":1,"deadLetter":1,"failed":0,"pending":4,"processing":1,"total":7}}`,
		admQueueID(t, c, "stats"), def, p2))

	// Acking the leased message ends the processing; an empty partition has null message times.
	admAck(t, c, map[string]any{"transactionId": "d3", "partitionId": def, "leaseId": *p.LeaseID, "status": "completed"})
	admExpect(t, c, "GET", "/api/v1/resources/queues/other.x", nil, 200, fmt.Sprintf(`{
		"createdAt":"<ms>","id":%q,"name":"other.x","namespace":"other","task":"x",
		"options":{"completedRetentionSeconds":0,"deadLetterQueue":false,"delayedProcessing":0,"dlqAfterMaxRetries":false,
			"encryptionEnabled":false,"leaseTime":300,"maxSize":0,"maxWaitTimeSeconds":0,"priority":0,"retentionEnabled":false,
			"retentionSeconds":0,"retryDelay":1000,"retryLimit":3,"ttl":3600,"windowBuffer":0},
		"partitions":[{"createdAt":"<ms>","id":%q,"name":"Default","newestMessage":null,"oldestMessage":null,
			"stats":{"completed":0,"deadLetter":0,"failed":0,"pending":0,"processing":0,"total":0}}],
		"totals":{"completed":0,"deadLetter":0,"failed":0,"pending":0,"processing":0,"total":0}}`,
		other["queueId"], other["partitionId"]))
	detail := admDecode[map[string]any](t, c, "GET", "/api/v1/resources/queues/stats", nil, 200)
	if tot := detail["totals"].(map[string]any); tot["completed"] != 2.0 || tot["processing"] != 0.0 || tot["pending"] != 4.0 {
		t.Fatalf("totals after ack: %v", tot)
	}

	admExpect(t, c, "GET", "/api/v1/resources/queues/nosuch", nil, 404, `{"error":"Queue not found"}`)
}

// admQueueID reads a queue's id from the queue list.
func admQueueID(t *testing.T, c *servertest.Client, name string) string {
	t.Helper()
	list := admDecode[struct {
		Queues []struct{ ID, Name string }
	}](t, c, "GET", "/api/v1/resources/queues", nil, 200)
	for _, q := range list.Queues {
		if q.Name == name {
			return q.ID
		}
	}
	t.Fatalf("queue %s not listed: %+v", name, list)
	return ""
}

func TestAdminDeleteQueue(t *testing.T) {
	t.Parallel()
	c := admStart(t)

	res := admPush(t, c,
		map[string]any{"queue": "gone", "payload": 1, "transactionId": "t1"},
		map[string]any{"queue": "gone", "partition": "p1", "payload": 2, "transactionId": "t2"},
	)
	admPush(t, c, map[string]any{"queue": "kept", "payload": "k", "transactionId": "t1"})
	oldPID := *res[0].PartitionID
	if p := admPop(t, c, "/api/v1/pop/queue/gone", "batch", "10", "partitions", "2", "consumerGroup", "g1", "subscriptionFrom", "2000-01-01T00:00:00Z", "autoAck", "true"); len(p.Messages) != 2 {
		t.Fatalf("group pop: %+v", p)
	}
	p := admPop(t, c, "/api/v1/pop/queue/gone/partition/Default", "batch", "10")
	admAck(t, c, map[string]any{"transactionId": "t1", "partitionId": oldPID, "leaseId": *p.LeaseID, "status": "dlq"})
	c.JSON("POST", "/api/v1/traces", map[string]any{"transactionId": "t2", "partitionId": *res[1].PartitionID, "data": map[string]any{}, "traceNames": "gone-trace"}, 200, nil)

	admExpect(t, c, "DELETE", "/api/v1/resources/queues/gone", nil, 200, `{"deleted":true,"existed":true,"queue":"gone"}`)
	admExpect(t, c, "DELETE", "/api/v1/resources/queues/gone", nil, 200, `{"deleted":true,"existed":false,"queue":"gone"}`)
	admExpect(t, c, "GET", "/api/v1/resources/queues/gone", nil, 404, `{"error":"Queue not found"}`)
	admExpect(t, c, "GET", "/api/v1/messages/"+oldPID+"/t1", nil, 404, `{"error":"Message not found"}`)

	// Nothing of the queue is left: no orphaned messages or cursors (neither has a foreign key),
	// no subscription metadata, no dead letters, no traces. The other queue is untouched.
	var orphans, cursors, meta int
	pool := c.Broker.Store().Pool()
	if err := pool.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM queen.messages m WHERE NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.id = m.partition_id)),
			(SELECT count(*) FROM queen.partition_consumers pc WHERE NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.id = pc.partition_id)),
			(SELECT count(*) FROM queen.consumer_groups_metadata WHERE queue_name = 'gone')`).Scan(&orphans, &cursors, &meta); err != nil {
		t.Fatal(err)
	}
	if orphans != 0 || cursors != 0 || meta != 0 {
		t.Fatalf("after delete: %d orphaned messages, %d orphaned cursors, %d metadata rows", orphans, cursors, meta)
	}
	admExpect(t, c, "GET", "/api/v1/consumer-groups", nil, 200, `[]`)
	admExpect(t, c, "GET", "/api/v1/dlq", nil, 200, `{"messages":[],"pagination":{"limit":100,"offset":0},"total":0}`)
	admExpect(t, c, "GET", "/api/v1/traces/names", nil, 200, `{"pagination":{"limit":50,"offset":0},"total":0,"trace_names":[]}`)
	list := admDecode[struct{ Queues []struct{ Name string } }](t, c, "GET", "/api/v1/resources/queues", nil, 200)
	if len(list.Queues) != 1 || list.Queues[0].Name != "kept" {
		t.Fatalf("queue list after delete: %+v", list)
	}

	// The same name starts fresh: t1 is new again (no duplicate), the group reads from the start
	// of the new queue, and queue mode gets only the new message.
	fresh := admPush(t, c, map[string]any{"queue": "gone", "payload": "new", "transactionId": "t1"})
	if *fresh[0].PartitionID == oldPID {
		t.Fatalf("partition id reused: %+v", fresh)
	}
	if p := admPop(t, c, "/api/v1/pop/queue/gone", "batch", "10", "autoAck", "true"); !slices.Equal(p.txIDs(), []string{"t1"}) || string(p.Messages[0].Data) != `"new"` {
		t.Fatalf("pop after re-create: %+v", p)
	}
	if p := admPop(t, c, "/api/v1/pop/queue/gone", "batch", "10", "autoAck", "true", "consumerGroup", "g1"); !slices.Equal(p.txIDs(), []string{"t1"}) {
		t.Fatalf("group pop after re-create: %+v", p)
	}
	if p := admPop(t, c, "/api/v1/pop/queue/kept", "batch", "10", "autoAck", "true"); !slices.Equal(p.txIDs(), []string{"t1"}) {
		t.Fatalf("other queue: %+v", p)
	}
}

func TestAdminMessages(t *testing.T) {
	t.Parallel()
	c := admStart(t)

	admExpect(t, c, "GET", "/api/v1/messages?queue=browse", nil, 200, `{"messages":[],"mode":{"busGroupsCount":0,"hasQueueMode":false,"type":"none"}}`)
	admDecode[map[string]any](t, c, "POST", "/api/v1/configure", map[string]any{"queue": "browse", "task": "scan", "options": map[string]any{"priority": 7}}, 200)
	res := admPush(t, c,
		map[string]any{"queue": "browse", "payload": 1, "transactionId": "a1"},
		map[string]any{"queue": "browse", "payload": 2, "transactionId": "a2", "traceId": "11111111-2222-3333-4444-555555555555"},
		map[string]any{"queue": "browse", "payload": 3, "transactionId": "a3"},
	)
	// A push of its own, after the others: the list is newest first, and pushes to different
	// partitions commit in separate transactions.
	res = append(res, admPush(t, c, map[string]any{"queue": "browse", "partition": "p2", "payload": 4, "transactionId": "b1"})...)
	admPush(t, c, map[string]any{"queue": "elsewhere", "payload": 0})
	def, p2 := *res[0].PartitionID, *res[3].PartitionID

	// a1 completed, a2 leased, a3 pending, b1 dead-lettered.
	p := admPop(t, c, "/api/v1/pop/queue/browse/partition/Default", "batch", "1")
	admAck(t, c, map[string]any{"transactionId": "a1", "partitionId": def, "leaseId": *p.LeaseID})
	p = admPop(t, c, "/api/v1/pop/queue/browse/partition/Default", "batch", "1")
	if !slices.Equal(p.txIDs(), []string{"a2"}) {
		t.Fatalf("second pop: %+v", p)
	}
	pb := admPop(t, c, "/api/v1/pop/queue/browse/partition/p2", "batch", "1")
	admAck(t, c, map[string]any{"transactionId": "b1", "partitionId": p2, "leaseId": *pb.LeaseID, "status": "dlq", "error": "poison"})

	entry := func(id, tx, pid, part, status string, lease bool, trace string) string {
		leaseAt := "null"
		if lease {
			leaseAt = `"<ms>"`
		}
		if trace != "null" {
			trace = `"` + trace + `"`
		}
		return fmt.Sprintf(`{"busStatus":{"consumedBy":0,"totalGroups":0},"createdAt":"<ms>","id":%q,"leaseExpiresAt":%s,"namespace":"browse",
			"partition":%q,"partitionId":%q,"producerSub":null,"queue":"browse","queuePath":"browse/%s","queuePriority":7,
			"queueStatus":%q,"status":%q,"task":"scan","traceId":%s,"transactionId":%q}`,
			id, leaseAt, part, pid, part, status, status, trace, tx)
	}
	b1 := entry(res[3].MessageID, "b1", p2, "p2", "dead_letter", false, "null")
	a3 := entry(res[2].MessageID, "a3", def, "Default", "pending", false, "null")
	a2 := entry(res[1].MessageID, "a2", def, "Default", "processing", true, "11111111-2222-3333-4444-555555555555")
	a1 := entry(res[0].MessageID, "a1", def, "Default", "completed", false, "null")
	queueMode := `"mode":{"busGroupsCount":0,"hasQueueMode":true,"type":"queue"}`
	list := func(entries ...string) string {
		return `{"messages":[` + strings.Join(entries, ",") + `],` + queueMode + `}`
	}

	// Newest first; every derived status.
	admExpect(t, c, "GET", "/api/v1/messages?queue=browse", nil, 200, list(b1, a3, a2, a1))
	admExpect(t, c, "GET", "/api/v1/messages?queue=browse&status=pending", nil, 200, list(a3))
	admExpect(t, c, "GET", "/api/v1/messages?queue=browse&status=processing", nil, 200, list(a2))
	admExpect(t, c, "GET", "/api/v1/messages?queue=browse&status=completed", nil, 200, list(a1))
	admExpect(t, c, "GET", "/api/v1/messages?queue=browse&status=dead_letter", nil, 200, list(b1))
	admExpect(t, c, "GET", "/api/v1/messages?queue=browse&partition=Default", nil, 200, list(a3, a2, a1))
	admExpect(t, c, "GET", "/api/v1/messages?queue=browse&limit=2&offset=1", nil, 200, list(a3, a2))
	admExpect(t, c, "GET", "/api/v1/messages?ns=browse&task=scan&limit=1", nil, 200, list(b1))
	admExpect(t, c, "GET", "/api/v1/messages?task=nosuch", nil, 200, `{"messages":[],"mode":{"busGroupsCount":0,"hasQueueMode":false,"type":"none"}}`)
	if all := admDecode[struct{ Messages []any }](t, c, "GET", "/api/v1/messages", nil, 200); len(all.Messages) != 5 {
		t.Fatalf("unfiltered list: %v", all)
	}

	// The window: from/to are inclusive RFC 3339 bounds on createdAt, default the last hour.
	now := time.Now().UTC()
	window := func(from, to time.Time) string {
		return "/api/v1/messages?queue=browse&from=" + url.QueryEscape(from.Format(time.RFC3339Nano)) + "&to=" + url.QueryEscape(to.Format(time.RFC3339Nano))
	}
	admExpect(t, c, "GET", window(now.Add(-time.Minute), now.Add(time.Minute)), nil, 200, list(b1, a3, a2, a1))
	admExpect(t, c, "GET", window(now.Add(time.Minute), now.Add(2*time.Minute)), nil, 200, list())
	admExpect(t, c, "GET", window(now.Add(-3*time.Hour), now.Add(-2*time.Hour)), nil, 200, list())

	// A named group that consumed Default makes the mode hybrid and shows in busStatus.
	admPop(t, c, "/api/v1/pop/queue/browse/partition/Default", "batch", "10", "consumerGroup", "audit", "autoAck", "true")
	hybrid := admDecode[struct {
		Messages []struct {
			TransactionID string `json:"transactionId"`
			BusStatus     struct{ ConsumedBy, TotalGroups int }
		}
		Mode map[string]any
	}](t, c, "GET", "/api/v1/messages?queue=browse", nil, 200)
	if !reflect.DeepEqual(hybrid.Mode, map[string]any{"busGroupsCount": 1.0, "hasQueueMode": true, "type": "hybrid"}) {
		t.Fatalf("hybrid mode: %+v", hybrid.Mode)
	}
	for _, m := range hybrid.Messages {
		want := 1
		if m.TransactionID == "b1" {
			want = 0 // the group has no cursor on p2
		}
		if m.BusStatus.TotalGroups != want || m.BusStatus.ConsumedBy != want {
			t.Fatalf("busStatus of %s: %+v", m.TransactionID, m.BusStatus)
		}
	}

	for _, tc := range []struct{ query, want string }{
		{"from=yesterday", "from must be an RFC 3339 timestamp"},
		{"to=2026-13-01T00:00:00Z", "to must be an RFC 3339 timestamp"},
		{"status=done", "status must be one of pending, processing, completed, dead_letter"},
		{"limit=0", "limit must be a positive integer"},
		{"offset=-1", "offset must be a non-negative integer"},
	} {
		admExpect(t, c, "GET", "/api/v1/messages?"+tc.query, nil, 400, fmt.Sprintf(`{"error":%q}`, tc.want))
	}
}

func TestAdminMessageDetailAndDelete(t *testing.T) {
	t.Parallel()
	c := admStart(t)

	payload := `{"nested":{"list":[1,2.5,"três",null,true],"empty":{}},"unicode":"✓ \u00e9"}`
	res := admPush(t, c,
		map[string]any{"queue": "detail", "payload": json.RawMessage(payload), "transactionId": "m1"},
		map[string]any{"queue": "detail", "payload": "second", "transactionId": "m2"},
	)
	pid := *res[0].PartitionID
	base := "/api/v1/messages/" + pid + "/"

	// Fresh: pending, nobody has read the partition.
	admExpect(t, c, "GET", base+"m1", nil, 200, fmt.Sprintf(`{"consumerGroups":[],"createdAt":"<ms>","errorMessage":null,"id":%q,
		"isEncrypted":false,"leaseExpiresAt":null,"mode":{"busGroupsCount":0,"consumedByGroups":0,"hasQueueMode":false,"type":"none"},
		"namespace":"detail","partition":"Default","partitionId":%q,"payload":%s,"producerSub":null,"queue":"detail",
		"queueConfig":{"leaseTime":300,"priority":0,"retryDelay":1000,"retryLimit":3,"ttl":3600},"queuePath":"detail/Default",
		"retryCount":null,"status":"pending","task":"","traceId":null,"transactionId":"m1"}`, res[0].MessageID, pid, payload))
	// The payload comes back exactly as pushed (jsonb normalises only whitespace and key order).
	var got struct{ Payload json.RawMessage }
	c.JSON("GET", base+"m1", nil, 200, &got)
	var a, b any
	_ = json.Unmarshal(got.Payload, &a)
	_ = json.Unmarshal([]byte(payload), &b)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("payload %s, pushed %s", got.Payload, payload)
	}

	// Queue mode consumes m1 and leases m2; group g reads both; m2 is dead-lettered by g.
	p := admPop(t, c, "/api/v1/pop/queue/detail", "batch", "1")
	admAck(t, c, map[string]any{"transactionId": "m1", "partitionId": pid, "leaseId": *p.LeaseID})
	admPop(t, c, "/api/v1/pop/queue/detail", "batch", "1")
	pg := admPop(t, c, "/api/v1/pop/queue/detail", "batch", "2", "consumerGroup", "g")
	admAck(t, c, map[string]any{"transactionId": "m1", "partitionId": pid, "leaseId": *pg.LeaseID, "consumerGroup": "g"})
	admAck(t, c, map[string]any{"transactionId": "m2", "partitionId": pid, "leaseId": *pg.LeaseID, "consumerGroup": "g", "status": "dlq", "error": "cannot parse"})

	m1 := admDecode[map[string]any](t, c, "GET", base+"m1", nil, 200)
	if m1["status"] != "completed" || !reflect.DeepEqual(m1["mode"], map[string]any{"busGroupsCount": 1.0, "consumedByGroups": 1.0, "hasQueueMode": true, "type": "hybrid"}) {
		t.Fatalf("m1: %v", m1)
	}
	if want := []any{
		map[string]any{"consumed": true, "leaseExpiresAt": nil, "name": "__QUEUE_MODE__"},
		map[string]any{"consumed": true, "leaseExpiresAt": nil, "name": "g"},
	}; !reflect.DeepEqual(m1["consumerGroups"], want) {
		t.Fatalf("m1 groups: %v", m1["consumerGroups"])
	}
	m2 := admDecode[map[string]any](t, c, "GET", base+"m2", nil, 200)
	if m2["status"] != "dead_letter" || m2["errorMessage"] != "cannot parse" || m2["retryCount"] != 0.0 || m2["payload"] != "second" {
		t.Fatalf("m2: %v", m2)
	}
	groups := m2["consumerGroups"].([]any)
	qm := groups[0].(map[string]any)
	if len(groups) != 2 || qm["name"] != "__QUEUE_MODE__" || qm["consumed"] != false || !admMsTime.MatchString(fmt.Sprint(qm["leaseExpiresAt"])) {
		t.Fatalf("m2 groups: %v", groups)
	}

	admExpect(t, c, "GET", base+"nosuch", nil, 404, `{"error":"Message not found"}`)
	admExpect(t, c, "GET", "/api/v1/messages/00000000-0000-0000-0000-000000000000/m1", nil, 404, `{"error":"Message not found"}`)
	admExpect(t, c, "GET", "/api/v1/messages/not-a-uuid/m1", nil, 400, `{"error":"partitionId must be a UUID"}`)

	// Delete: the message, its dead letter and its traces go; the other message stays.
	c.JSON("POST", "/api/v1/traces", map[string]any{"transactionId": "m2", "partitionId": pid, "data": 1}, 200, nil)
	admExpect(t, c, "DELETE", base+"m2", nil, 200, fmt.Sprintf(`{"message":"Message deleted successfully","partitionId":%q,"success":true,"transactionId":"m2"}`, pid))
	admExpect(t, c, "GET", base+"m2", nil, 404, `{"error":"Message not found"}`)
	admExpect(t, c, "DELETE", base+"m2", nil, 200, fmt.Sprintf(`{"message":"Message not found","partitionId":%q,"success":false,"transactionId":"m2"}`, pid))
	admExpect(t, c, "DELETE", "/api/v1/messages/nope/m2", nil, 400, `{"error":"partitionId must be a UUID"}`)
	admExpect(t, c, "GET", "/api/v1/dlq?queue=detail", nil, 200, `{"messages":[],"pagination":{"limit":100,"offset":0},"total":0}`)
	admExpect(t, c, "GET", "/api/v1/traces/"+pid+"/m2", nil, 200, `{"traces":[]}`)
	left := admDecode[struct {
		Messages []struct{ TransactionID string }
	}](t, c, "GET", "/api/v1/messages?queue=detail", nil, 200)
	if len(left.Messages) != 1 || left.Messages[0].TransactionID != "m1" {
		t.Fatalf("after delete: %+v", left)
	}
}

func TestAdminDLQ(t *testing.T) {
	t.Parallel()
	c := admStart(t)
	start := time.Now().UTC()

	admExpect(t, c, "GET", "/api/v1/dlq?queue=dlqq", nil, 200, `{"messages":[],"pagination":{"limit":100,"offset":0},"total":0}`)
	admDecode[map[string]any](t, c, "POST", "/api/v1/configure", map[string]any{"queue": "dlqq", "options": map[string]any{"retryLimit": 1}}, 200)
	res := admPush(t, c,
		map[string]any{"queue": "dlqq", "partition": "p1", "payload": map[string]any{"n": 1}, "transactionId": "x1"},
		map[string]any{"queue": "dlqq", "partition": "p1", "payload": map[string]any{"n": 2}, "transactionId": "x2"},
		map[string]any{"queue": "dlqq", "partition": "p2", "payload": map[string]any{"n": 3}, "transactionId": "x3"},
	)
	admPush(t, c, map[string]any{"queue": "otherq", "payload": 0, "transactionId": "o1"})
	p1, p2 := *res[0].PartitionID, *res[2].PartitionID

	// x1: failed twice with retryLimit 1 -> dead letter with retryCount 1.
	p := admPop(t, c, "/api/v1/pop/queue/dlqq/partition/p1", "batch", "1")
	if r := admAck(t, c, map[string]any{"transactionId": "x1", "partitionId": p1, "leaseId": *p.LeaseID, "status": "failed", "error": "first"}); r["dlq"] != false {
		t.Fatalf("first failure: %v", r)
	}
	p = admPop(t, c, "/api/v1/pop/queue/dlqq/partition/p1", "batch", "1")
	if r := admAck(t, c, map[string]any{"transactionId": "x1", "partitionId": p1, "leaseId": *p.LeaseID, "status": "failed", "error": "second"}); r["dlq"] != true {
		t.Fatalf("second failure: %v", r)
	}
	// x3: dead-lettered at once by queue mode; x2: by group g1.
	p = admPop(t, c, "/api/v1/pop/queue/dlqq/partition/p2", "batch", "1")
	admAck(t, c, map[string]any{"transactionId": "x3", "partitionId": p2, "leaseId": *p.LeaseID, "status": "dlq", "error": "poison"})
	p = admPop(t, c, "/api/v1/pop/queue/dlqq/partition/p1", "batch", "2", "consumerGroup", "g1")
	admAck(t, c, map[string]any{"transactionId": "x2", "partitionId": p1, "leaseId": *p.LeaseID, "status": "dlq", "consumerGroup": "g1", "error": "g1 says no"})
	// otherq's dead letter must not show under dlqq.
	p = admPop(t, c, "/api/v1/pop/queue/otherq", "batch", "1")
	admAck(t, c, map[string]any{"transactionId": "o1", "partitionId": p.Messages[0].PartitionID, "leaseId": *p.LeaseID, "status": "dlq"})

	entry := func(group string, n int, errText, id, part, pid string, retries int, tx string) string {
		return fmt.Sprintf(`{"consumerGroup":%q,"createdAt":"<ms>","data":{"n":%d},"errorMessage":%q,"failedAt":"<ms>","id":%q,
			"partition":%q,"partitionId":%q,"producerSub":null,"queue":"dlqq","retryCount":%d,"transactionId":%q}`,
			group, n, errText, id, part, pid, retries, tx)
	}
	x2 := entry("g1", 2, "g1 says no", res[1].MessageID, "p1", p1, 0, "x2")
	x3 := entry("__QUEUE_MODE__", 3, "poison", res[2].MessageID, "p2", p2, 0, "x3")
	x1 := entry("__QUEUE_MODE__", 1, "second", res[0].MessageID, "p1", p1, 1, "x1")
	page := func(limit, offset, total int, entries ...string) string {
		return fmt.Sprintf(`{"messages":[%s],"pagination":{"limit":%d,"offset":%d},"total":%d}`, strings.Join(entries, ","), limit, offset, total)
	}

	// Newest failure first; total is the real count of matching entries.
	admExpect(t, c, "GET", "/api/v1/dlq?queue=dlqq", nil, 200, page(100, 0, 3, x2, x3, x1))
	admExpect(t, c, "GET", "/api/v1/dlq?queue=dlqq&limit=1", nil, 200, page(1, 0, 3, x2))
	admExpect(t, c, "GET", "/api/v1/dlq?queue=dlqq&limit=2&offset=1", nil, 200, page(2, 1, 3, x3, x1))
	admExpect(t, c, "GET", "/api/v1/dlq?queue=dlqq&offset=10", nil, 200, page(100, 10, 3))
	admExpect(t, c, "GET", "/api/v1/dlq?queue=dlqq&consumerGroup=g1", nil, 200, page(100, 0, 1, x2))
	admExpect(t, c, "GET", "/api/v1/dlq?queue=dlqq&consumerGroup=__QUEUE_MODE__&partition=p1", nil, 200, page(100, 0, 1, x1))
	admExpect(t, c, "GET", "/api/v1/dlq?queue=dlqq&partition=p2", nil, 200, page(100, 0, 1, x3))
	// Unfiltered, with a limit above the cap.
	all := admDecode[struct {
		Messages   []struct{ Queue string }
		Pagination struct{ Limit, Offset int }
		Total      int
	}](t, c, "GET", "/api/v1/dlq?limit=5000", nil, 200)
	if all.Total != 4 || len(all.Messages) != 4 || all.Messages[0].Queue != "otherq" || all.Pagination.Limit != 1000 {
		t.Fatalf("unfiltered: %+v", all)
	}

	q := func(name string, ts time.Time) string {
		return name + "=" + url.QueryEscape(ts.Format(time.RFC3339Nano))
	}
	admExpect(t, c, "GET", "/api/v1/dlq?queue=dlqq&"+q("from", start.Add(-time.Minute)), nil, 200, page(100, 0, 3, x2, x3, x1))
	admExpect(t, c, "GET", "/api/v1/dlq?queue=dlqq&"+q("from", start.Add(time.Hour)), nil, 200, page(100, 0, 0))
	admExpect(t, c, "GET", "/api/v1/dlq?queue=dlqq&"+q("to", start.Add(-time.Minute)), nil, 200, page(100, 0, 0))
	admExpect(t, c, "GET", "/api/v1/dlq?queue=dlqq&"+q("from", start.Add(-time.Minute))+"&"+q("to", time.Now().Add(time.Minute)), nil, 200, page(100, 0, 3, x2, x3, x1))
	admExpect(t, c, "GET", "/api/v1/dlq?from=soon", nil, 400, `{"error":"from must be an RFC 3339 timestamp"}`)
	admExpect(t, c, "GET", "/api/v1/dlq?limit=abc", nil, 400, `{"error":"limit must be a positive integer"}`)
}

func TestAdminTraces(t *testing.T) {
	t.Parallel()
	c := admStart(t)

	res := admPush(t, c,
		map[string]any{"queue": "traced", "payload": map[string]any{"order": 1}, "transactionId": "o1"},
		map[string]any{"queue": "traced", "partition": "p2", "payload": map[string]any{"order": 2}, "transactionId": "o2"},
	)
	pid, pid2 := *res[0].PartitionID, *res[1].PartitionID
	record := func(body map[string]any) string {
		t.Helper()
		out := admDecode[map[string]any](t, c, "POST", "/api/v1/traces", body, 200)
		id, _ := out["traceId"].(string)
		if out["success"] != true || len(id) != 36 || len(out) != 2 {
			t.Fatalf("record %v: %v", body, out)
		}
		return id
	}
	t1 := record(map[string]any{"transactionId": "o1", "partitionId": pid, "eventType": "processing", "traceNames": []string{"tenant-acme", "order-1"}, "data": map[string]any{"step": "charged"}})
	t2 := record(map[string]any{"transactionId": "o1", "partitionId": pid, "consumerGroup": "billing", "traceNames": "order-1", "data": "shipped"})
	t3 := record(map[string]any{"transactionId": "o1", "partitionId": pid, "traceNames": nil, "data": []int{1, 2}})
	t4 := record(map[string]any{"transactionId": "o2", "partitionId": pid2, "traceNames": []string{"tenant acme", ""}, "data": map[string]any{}})

	// Oldest first, snake_case, worker_id = the broker's server id.
	admExpect(t, c, "GET", "/api/v1/traces/"+pid+"/o1", nil, 200, fmt.Sprintf(`{"traces":[
		{"consumer_group":"__QUEUE_MODE__","created_at":"<ms>","data":{"step":"charged"},"event_type":"processing","id":%q,"trace_names":["tenant-acme","order-1"],"worker_id":%q},
		{"consumer_group":"billing","created_at":"<ms>","data":"shipped","event_type":"info","id":%q,"trace_names":["order-1"],"worker_id":%q},
		{"consumer_group":"__QUEUE_MODE__","created_at":"<ms>","data":[1,2],"event_type":"info","id":%q,"trace_names":[],"worker_id":%q}]}`,
		t1, admServerID, t2, admServerID, t3, admServerID))
	admExpect(t, c, "GET", "/api/v1/traces/"+pid+"/nosuch", nil, 200, `{"traces":[]}`)
	admExpect(t, c, "GET", "/api/v1/traces/bad/o1", nil, 400, `{"error":"partitionId must be a UUID"}`)

	// By name: newest first, with the message.
	named := func(id, group, data, event, names string) string {
		return fmt.Sprintf(`{"consumer_group":%q,"created_at":"<ms>","data":%s,"event_type":%q,"id":%q,"message_payload":{"order":1},
			"partition_id":%q,"partition_name":"Default","queue_name":"traced","trace_names":%s,"transaction_id":"o1","worker_id":%q}`,
			group, data, event, id, pid, names, admServerID)
	}
	n2 := named(t2, "billing", `"shipped"`, "info", `["order-1"]`)
	n1 := named(t1, "__QUEUE_MODE__", `{"step":"charged"}`, "processing", `["tenant-acme","order-1"]`)
	admExpect(t, c, "GET", "/api/v1/traces/by-name/order-1", nil, 200, `{"pagination":{"limit":100,"offset":0},"total":2,"traces":[`+n2+`,`+n1+`]}`)
	admExpect(t, c, "GET", "/api/v1/traces/by-name/order-1?limit=1&offset=1", nil, 200, `{"pagination":{"limit":1,"offset":1},"total":2,"traces":[`+n1+`]}`)
	admExpect(t, c, "GET", "/api/v1/traces/by-name/nosuch", nil, 200, `{"pagination":{"limit":100,"offset":0},"total":0,"traces":[]}`)
	spaced := admDecode[struct {
		Total  int
		Traces []struct {
			ID            string `json:"id"`
			PartitionName string `json:"partition_name"`
		}
	}](t, c, "GET", "/api/v1/traces/by-name/tenant%20acme", nil, 200)
	if spaced.Total != 1 || len(spaced.Traces) != 1 || spaced.Traces[0].ID != t4 || spaced.Traces[0].PartitionName != "p2" {
		t.Fatalf("percent-encoded name: %+v", spaced)
	}

	// Names: most recently seen first.
	admExpect(t, c, "GET", "/api/v1/traces/names", nil, 200, `{"pagination":{"limit":50,"offset":0},"total":3,"trace_names":[
		{"last_seen":"<ms>","message_count":1,"trace_count":1,"trace_name":"tenant acme"},
		{"last_seen":"<ms>","message_count":1,"trace_count":2,"trace_name":"order-1"},
		{"last_seen":"<ms>","message_count":1,"trace_count":1,"trace_name":"tenant-acme"}]}`)
	admExpect(t, c, "GET", "/api/v1/traces/names?limit=1&offset=2", nil, 200, `{"pagination":{"limit":1,"offset":2},"total":3,"trace_names":[
		{"last_seen":"<ms>","message_count":1,"trace_count":1,"trace_name":"tenant-acme"}]}`)

	admExpect(t, c, "POST", "/api/v1/traces", map[string]any{"transactionId": "nope", "partitionId": pid, "data": 1}, 200, `{"error":"Message not found","success":false}`)
	for _, tc := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"transactionId": "o1", "data": 1}, "transactionId and partitionId are required"},
		{map[string]any{"partitionId": pid, "data": 1}, "transactionId and partitionId are required"},
		{map[string]any{"transactionId": "o1", "partitionId": pid}, "data is required"},
		{map[string]any{"transactionId": "o1", "partitionId": "x", "data": 1}, "partitionId must be a UUID"},
		{map[string]any{"transactionId": "o1", "partitionId": pid, "data": 1, "traceNames": 5}, "traceNames must be a string or an array of strings"},
		{map[string]any{"transactionId": "o1", "partitionId": pid, "data": 1, "traceNames": []any{"a", 1}}, "traceNames must be a string or an array of strings"},
	} {
		admExpect(t, c, "POST", "/api/v1/traces", tc.body, 400, fmt.Sprintf(`{"error":%q}`, tc.want))
	}
}

type admGroup struct {
	MaxTimeLag            int      `json:"maxTimeLag"`
	Members               int      `json:"members"`
	Name                  string   `json:"name"`
	PartitionsWithLag     int      `json:"partitionsWithLag"`
	QueueName             string   `json:"queueName"`
	State                 string   `json:"state"`
	SubscriptionCreatedAt *string  `json:"subscriptionCreatedAt"`
	SubscriptionMode      *string  `json:"subscriptionMode"`
	SubscriptionTimestamp *string  `json:"subscriptionTimestamp"`
	Topics                []string `json:"topics"`
	TotalLag              int      `json:"totalLag"`
}

func TestAdminConsumerGroups(t *testing.T) {
	t.Parallel()
	c := admStart(t)

	if status, raw := c.Do("GET", "/api/v1/consumer-groups", nil); status != 200 || string(raw) != `[]` {
		t.Fatalf("empty group list: %d %s", status, raw)
	}
	admPush(t, c,
		map[string]any{"queue": "cg", "partition": "p1", "payload": 1, "transactionId": "a"},
		map[string]any{"queue": "cg", "partition": "p1", "payload": 2, "transactionId": "b"},
		map[string]any{"queue": "cg", "partition": "p2", "payload": 3, "transactionId": "c"},
		map[string]any{"queue": "cg", "partition": "p2", "payload": 4, "transactionId": "d"},
	)
	admPush(t, c, map[string]any{"queue": "cg2", "payload": 5})

	// g1 reads everything; g2 subscribes to new messages on p1 only; queue mode leases p1.
	if p := admPop(t, c, "/api/v1/pop/queue/cg", "batch", "10", "partitions", "2", "consumerGroup", "g1", "autoAck", "true"); len(p.Messages) != 4 {
		t.Fatalf("g1 pop: %+v", p)
	}
	if p := admPop(t, c, "/api/v1/pop/queue/cg/partition/p1", "batch", "10", "consumerGroup", "g2", "subscriptionMode", "new"); len(p.Messages) != 0 {
		t.Fatalf("g2 pop: %+v", p)
	}
	qm := admPop(t, c, "/api/v1/pop/queue/cg/partition/p1", "batch", "1")
	if !slices.Equal(qm.txIDs(), []string{"a"}) {
		t.Fatalf("queue-mode pop: %+v", qm)
	}

	groups := admDecode[[]admGroup](t, c, "GET", "/api/v1/consumer-groups", nil, 200)
	if len(groups) != 3 {
		t.Fatalf("groups: %+v", groups)
	}
	q, g1, g2 := groups[0], groups[1], groups[2]
	if q.Name != "__QUEUE_MODE__" || q.QueueName != "cg" || q.Members != 1 || q.TotalLag != 2 || q.PartitionsWithLag != 1 ||
		q.State != "Dead" || q.SubscriptionMode != nil || !slices.Equal(q.Topics, []string{"cg"}) {
		t.Fatalf("queue mode: %+v", q)
	}
	if g1.Name != "g1" || g1.Members != 2 || g1.TotalLag != 0 || g1.PartitionsWithLag != 0 || g1.MaxTimeLag != 0 || g1.State != "Stable" {
		t.Fatalf("g1: %+v", g1)
	}
	if g2.Name != "g2" || g2.Members != 1 || g2.TotalLag != 0 || g2.State != "Stable" || admStr(g2.SubscriptionMode) != "new" ||
		!admMsTime.MatchString(admStr(g2.SubscriptionTimestamp)) || !admMsTime.MatchString(admStr(g2.SubscriptionCreatedAt)) {
		t.Fatalf("g2: %+v", g2)
	}

	admExpect(t, c, "GET", "/api/v1/consumer-groups/g1", nil, 200, `{"cg":{"partitions":[
		{"leaseActive":false,"lastConsumedAt":"<ms>","offsetLag":0,"partition":"p1","timeLagSeconds":0,"totalConsumed":2,"workerId":null},
		{"leaseActive":false,"lastConsumedAt":"<ms>","offsetLag":0,"partition":"p2","timeLagSeconds":0,"totalConsumed":2,"workerId":null}]}}`)
	detail := admDecode[map[string]struct {
		Partitions []map[string]any
	}](t, c, "GET", "/api/v1/consumer-groups/__QUEUE_MODE__", nil, 200)
	if ps := detail["cg"].Partitions; len(detail) != 1 || len(ps) != 1 || ps[0]["leaseActive"] != true || ps[0]["workerId"] != *qm.LeaseID ||
		ps[0]["offsetLag"] != 2.0 || ps[0]["totalConsumed"] != 0.0 || ps[0]["lastConsumedAt"] != nil {
		t.Fatalf("queue-mode detail: %+v", detail)
	}
	admExpect(t, c, "GET", "/api/v1/consumer-groups/nosuch", nil, 404, `{"error":"Consumer group not found"}`)

	// Subscription: moving g2's start back to 2020 makes it read p2 (no cursor there yet) from
	// the beginning; p1, where it has a cursor, is unaffected.
	admExpect(t, c, "POST", "/api/v1/consumer-groups/g2/subscription", map[string]any{"subscriptionTimestamp": "2020-01-01T00:00:00Z"}, 200,
		`{"consumerGroup":"g2","newTimestamp":"2020-01-01T00:00:00.000Z","rowsUpdated":1,"success":true}`)
	admExpect(t, c, "POST", "/api/v1/consumer-groups/g1/subscription", map[string]any{"subscriptionTimestamp": "2020-01-01T00:00:00+02:00"}, 200,
		`{"consumerGroup":"g1","newTimestamp":"2019-12-31T22:00:00.000Z","rowsUpdated":0,"success":true}`)
	if p := admPop(t, c, "/api/v1/pop/queue/cg/partition/p2", "batch", "10", "consumerGroup", "g2", "autoAck", "true"); !slices.Equal(p.txIDs(), []string{"c", "d"}) {
		t.Fatalf("g2 on p2 after the subscription moved: %+v", p)
	}
	if p := admPop(t, c, "/api/v1/pop/queue/cg/partition/p1", "batch", "10", "consumerGroup", "g2", "autoAck", "true"); len(p.Messages) != 0 {
		t.Fatalf("g2 on p1: %+v", p)
	}
	for _, tc := range []struct {
		body any
		want string
	}{
		{map[string]any{}, "Missing subscriptionTimestamp in request body"},
		{map[string]any{"subscriptionTimestamp": nil}, "Missing subscriptionTimestamp in request body"},
		{map[string]any{"subscriptionTimestamp": 5}, "subscriptionTimestamp must be an RFC 3339 timestamp string"},
		{map[string]any{"subscriptionTimestamp": "yesterday"}, "subscriptionTimestamp must be an RFC 3339 timestamp string"},
	} {
		admExpect(t, c, "POST", "/api/v1/consumer-groups/g2/subscription", tc.body, 400, fmt.Sprintf(`{"error":%q}`, tc.want))
	}
	admExpect(t, c, "POST", "/api/v1/consumer-groups/g2/subscription", "", 400, `{"error":"Empty request body"}`)

	// Delete g1 on cg keeping its metadata: it reads the queue again from the start.
	admExpect(t, c, "DELETE", "/api/v1/consumer-groups/g1/queues/cg?deleteMetadata=false", nil, 200,
		`{"consumerGroup":"g1","deletedPartitions":2,"metadataDeleted":false,"queueName":"cg","success":true}`)
	admExpect(t, c, "GET", "/api/v1/consumer-groups/g1", nil, 404, `{"error":"Consumer group not found"}`)
	if p := admPop(t, c, "/api/v1/pop/queue/cg/partition/p1", "batch", "10", "consumerGroup", "g1", "autoAck", "true"); !slices.Equal(p.txIDs(), []string{"a", "b"}) {
		t.Fatalf("g1 after delete: %+v", p)
	}
	// Delete g2 everywhere with its metadata (the default).
	admExpect(t, c, "DELETE", "/api/v1/consumer-groups/g2", nil, 200,
		`{"consumerGroup":"g2","deletedPartitions":2,"metadataDeleted":true,"success":true}`)
	admExpect(t, c, "GET", "/api/v1/consumer-groups/g2", nil, 404, `{"error":"Consumer group not found"}`)
	admExpect(t, c, "DELETE", "/api/v1/consumer-groups/g2?deleteMetadata=true", nil, 200,
		`{"consumerGroup":"g2","deletedPartitions":0,"metadataDeleted":true,"success":true}`)
	admExpect(t, c, "DELETE", "/api/v1/consumer-groups/g2?deleteMetadata=maybe", nil, 400, `{"error":"deleteMetadata must be true or false"}`)
	// g2 starts over: with no metadata left it reads p1 from the beginning.
	if p := admPop(t, c, "/api/v1/pop/queue/cg/partition/p1", "batch", "10", "consumerGroup", "g2", "autoAck", "true"); !slices.Equal(p.txIDs(), []string{"a", "b"}) {
		t.Fatalf("g2 after delete: %+v", p)
	}
	// __QUEUE_MODE__ is deletable like any group: its lease and cursor go, so a is delivered again.
	admExpect(t, c, "DELETE", "/api/v1/consumer-groups/__QUEUE_MODE__/queues/cg", nil, 200,
		`{"consumerGroup":"__QUEUE_MODE__","deletedPartitions":1,"metadataDeleted":true,"queueName":"cg","success":true}`)
	if p := admPop(t, c, "/api/v1/pop/queue/cg/partition/p1", "batch", "1"); !slices.Equal(p.txIDs(), []string{"a"}) {
		t.Fatalf("queue mode after delete: %+v", p)
	}
	names := []string{}
	for _, g := range admDecode[[]admGroup](t, c, "GET", "/api/v1/consumer-groups", nil, 200) {
		names = append(names, g.Name+"/"+g.QueueName)
	}
	if !slices.Equal(names, []string{"__QUEUE_MODE__/cg", "g1/cg", "g2/cg"}) {
		t.Fatalf("groups after deletes: %v", names)
	}
}

func TestAdminSeek(t *testing.T) {
	t.Parallel()
	c := admStart(t)

	// Three pushes, so three distinct creation times.
	var pid string
	for _, tx := range []string{"m1", "m2", "m3"} {
		pid = *admPush(t, c, map[string]any{"queue": "seek", "payload": tx, "transactionId": tx})[0].PartitionID
	}
	all := admPop(t, c, "/api/v1/pop/queue/seek", "batch", "10", "autoAck", "true")
	if !slices.Equal(all.txIDs(), []string{"m1", "m2", "m3"}) {
		t.Fatalf("first read: %+v", all)
	}
	seekPath := "/api/v1/consumer-groups/__QUEUE_MODE__/queues/seek/seek"

	// Seek to an old timestamp: everything is delivered again, in order.
	admExpect(t, c, "POST", seekPath, map[string]any{"timestamp": "2000-01-01T00:00:00Z"}, 200,
		`{"consumerGroup":"__QUEUE_MODE__","partitionsUpdated":1,"queueName":"seek","seekToEnd":false,"success":true,"targetTimestamp":"2000-01-01T00:00:00.000Z"}`)
	p := admPop(t, c, "/api/v1/pop/queue/seek", "batch", "10")
	if !slices.Equal(p.txIDs(), []string{"m1", "m2", "m3"}) {
		t.Fatalf("after seek to 2000: %+v", p)
	}

	// Seek to the end while that batch is leased: the lease is released and nothing is left.
	admExpect(t, c, "POST", seekPath, map[string]any{"toEnd": true}, 200,
		`{"consumerGroup":"__QUEUE_MODE__","partitionsUpdated":1,"queueName":"seek","seekToEnd":true,"success":true,"targetTimestamp":null}`)
	if e := admPop(t, c, "/api/v1/pop/queue/seek", "batch", "10"); len(e.Messages) != 0 || e.Error != "no_available_partition" {
		t.Fatalf("after seek to end: %+v", e)
	}
	var acked []map[string]any
	c.JSON("POST", "/api/v1/ack", map[string]any{"transactionId": "m3", "partitionId": pid, "leaseId": *p.LeaseID}, 200, &acked)
	if acked[0]["success"] != false || acked[0]["error"] != "Invalid or expired lease" {
		t.Fatalf("ack with the released lease: %v", acked)
	}
	admExpect(t, c, "GET", "/api/v1/consumer-groups/__QUEUE_MODE__", nil, 200, `{"seek":{"partitions":[
		{"leaseActive":false,"lastConsumedAt":"<ms>","offsetLag":0,"partition":"Default","timeLagSeconds":0,"totalConsumed":3,"workerId":null}]}}`)

	// Seek to m1's exact creation time: the cursor rests on m1, so m2 and m3 come next.
	admExpect(t, c, "POST", seekPath, map[string]any{"timestamp": all.Messages[0].CreatedAt}, 200,
		fmt.Sprintf(`{"consumerGroup":"__QUEUE_MODE__","partitionsUpdated":1,"queueName":"seek","seekToEnd":false,"success":true,"targetTimestamp":%q}`,
			all.Messages[0].CreatedAt[:23]+"Z"))
	if p := admPop(t, c, "/api/v1/pop/queue/seek", "batch", "10", "autoAck", "true"); !slices.Equal(p.txIDs(), []string{"m2", "m3"}) {
		t.Fatalf("after seek to m1: %+v", p)
	}

	// A named group: seek only moves partitions it has a cursor on.
	admExpect(t, c, "POST", "/api/v1/consumer-groups/late/queues/seek/seek", map[string]any{"toEnd": true}, 200,
		`{"consumerGroup":"late","partitionsUpdated":0,"queueName":"seek","seekToEnd":true,"success":true,"targetTimestamp":null}`)
	if p := admPop(t, c, "/api/v1/pop/queue/seek", "batch", "1", "consumerGroup", "late", "autoAck", "true"); !slices.Equal(p.txIDs(), []string{"m1"}) {
		t.Fatalf("late group: %+v", p)
	}
	admExpect(t, c, "POST", "/api/v1/consumer-groups/late/queues/seek/seek", map[string]any{"toEnd": true, "timestamp": "2000-01-01T00:00:00Z"}, 200,
		`{"consumerGroup":"late","partitionsUpdated":1,"queueName":"seek","seekToEnd":true,"success":true,"targetTimestamp":null}`)
	if e := admPop(t, c, "/api/v1/pop/queue/seek", "batch", "10", "consumerGroup", "late"); len(e.Messages) != 0 {
		t.Fatalf("late group after seek to end: %+v", e)
	}

	for _, body := range []any{map[string]any{}, map[string]any{"toEnd": false}, map[string]any{"timestamp": nil}} {
		admExpect(t, c, "POST", seekPath, body, 400, `{"error":"Must specify either 'toEnd': true or 'timestamp'"}`)
	}
	admExpect(t, c, "POST", seekPath, map[string]any{"timestamp": "last week"}, 400, `{"error":"timestamp must be an RFC 3339 timestamp string"}`)
	admExpect(t, c, "POST", seekPath, map[string]any{"toEnd": "yes"}, 400, `{"error":"toEnd must be a boolean"}`)

	// Partition seek: creates the cursor at the head for a new group, with no body at all.
	partSeek := "/api/v1/consumer-groups/fresh/queues/seek/partitions/Default/seek"
	admExpect(t, c, "POST", partSeek, nil, 200, fmt.Sprintf(`{"consumerGroup":"fresh","cursorMovedTo":%q,"partitionName":"Default","queueName":"seek","success":true,"updated":true}`,
		all.Messages[2].CreatedAt[:23]+"Z"))
	if e := admPop(t, c, "/api/v1/pop/queue/seek", "batch", "10", "consumerGroup", "fresh"); len(e.Messages) != 0 {
		t.Fatalf("fresh group after partition seek: %+v", e)
	}
	admPush(t, c, map[string]any{"queue": "seek", "payload": "m4", "transactionId": "m4"})
	if p := admPop(t, c, "/api/v1/pop/queue/seek", "batch", "10", "consumerGroup", "fresh", "autoAck", "true"); !slices.Equal(p.txIDs(), []string{"m4"}) {
		t.Fatalf("fresh group after a new push: %+v", p)
	}
	// An existing leased cursor moves too, and its lease is released.
	lp := admPop(t, c, "/api/v1/pop/queue/seek", "batch", "10", "consumerGroup", "late2")
	if len(lp.Messages) != 4 {
		t.Fatalf("late2: %+v", lp)
	}
	admDecode[map[string]any](t, c, "POST", "/api/v1/consumer-groups/late2/queues/seek/partitions/Default/seek", map[string]any{}, 200)
	if e := admPop(t, c, "/api/v1/pop/queue/seek/partition/Default", "batch", "10", "consumerGroup", "late2"); len(e.Messages) != 0 || e.Error != "" {
		t.Fatalf("late2 after partition seek: %+v", e)
	}
	admExpect(t, c, "POST", "/api/v1/consumer-groups/fresh/queues/seek/partitions/nosuch/seek", map[string]any{}, 404, `{"error":"Partition not found","success":false}`)
	admExpect(t, c, "POST", "/api/v1/consumer-groups/fresh/queues/nosuch/partitions/Default/seek", nil, 404, `{"error":"Partition not found","success":false}`)
	// An empty partition: the cursor moves to 0 and there is no message time.
	admDecode[map[string]any](t, c, "POST", "/api/v1/configure", map[string]any{"queue": "void"}, 200)
	admExpect(t, c, "POST", "/api/v1/consumer-groups/fresh/queues/void/partitions/Default/seek", nil, 200,
		`{"consumerGroup":"fresh","cursorMovedTo":null,"partitionName":"Default","queueName":"void","success":true,"updated":true}`)
}

func TestAdminLaggingGroups(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	push(t, c, item{"queue": "lagq", "partition": "slow", "payload": 1}, item{"queue": "lagq", "partition": "slow", "payload": 2})
	pop(t, c, "/api/v1/pop/queue/lagq", "consumerGroup", "g", "batch", "1", "autoAck", "true")
	exec(t, c, `UPDATE queen.segments SET created_at = now() - interval '2 hours'`)
	var rows []map[string]any
	c.JSON("GET", "/api/v1/consumer-groups/lagging?minLagSeconds=3600", nil, 200, &rows)
	if len(rows) != 1 || rows[0]["consumer_group"] != "g" || rows[0]["queue_name"] != "lagq" || rows[0]["partition_name"] != "slow" ||
		rows[0]["offset_lag"] != float64(1) || rows[0]["time_lag_seconds"].(float64) < 7200 {
		t.Fatalf("lagging: %v", rows)
	}
	c.JSON("GET", "/api/v1/consumer-groups/lagging?minLagSeconds=86400", nil, 200, &rows)
	if len(rows) != 0 {
		t.Fatalf("nothing lags a day: %v", rows)
	}
}

package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	"queen/config"
	"queen/pg/pgtest"
	"queen/server/servertest"
	"queen/testkit"
)

// The maintenance, outage and mesh tests share the helpers of this file. They talk to brokers
// through doer, which *servertest.Client and the mesh tests' meshNode both implement.

type doer interface {
	Do(method, path string, body any) (int, []byte)
}

// call sends a request, checks the status and decodes the JSON answer.
func call[T any](t testing.TB, c doer, method, path string, body any, want int) T {
	t.Helper()
	var out T
	status, raw := c.Do(method, path, body)
	if status != want {
		t.Fatalf("%s %s: status %d, want %d; body %s", method, path, status, want, raw)
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: cannot decode %s: %v", method, path, raw, err)
	}
	return out
}

// maintState is the body of GET/POST /api/v1/system/maintenance.
type maintState struct {
	BufferHealthy      bool   `json:"bufferHealthy"`
	BufferedMessages   int64  `json:"bufferedMessages"`
	MaintenanceMode    bool   `json:"maintenanceMode"`
	Message            string `json:"message"`
	PopMaintenanceMode *bool  `json:"popMaintenanceMode"`
	BufferStats        *struct {
		DBHealthy    bool  `json:"dbHealthy"`
		PendingCount int64 `json:"pendingCount"`
	} `json:"bufferStats"`
}

type popMaintState struct {
	Message            string `json:"message"`
	PopMaintenanceMode bool   `json:"popMaintenanceMode"`
}

// bufferStatus is the body of GET /api/v1/status/buffers.
type bufferStatus struct {
	Bytes            int64   `json:"bytes"`
	DBHealthy        bool    `json:"dbHealthy"`
	Failed           int64   `json:"failed"`
	Files            int     `json:"files"`
	OldestAgeSeconds float64 `json:"oldestAgeSeconds"`
	Pending          int64   `json:"pending"`
}

// sharedStats is the body of GET /internal/api/shared-state/stats.
type sharedStats struct {
	ServerID           string `json:"server_id"`
	MaintenanceMode    bool   `json:"maintenance_mode"`
	PopMaintenanceMode bool   `json:"pop_maintenance_mode"`
	Enabled            bool   `json:"enabled"`
	Authenticated      bool   `json:"authenticated"`
	PeerCount          int    `json:"peer_count"`
	Peers              []struct {
		Host      string `json:"host"`
		Alive     bool   `json:"alive"`
		Connected bool   `json:"connected"`
		LastSeen  string `json:"lastSeen"`
		ServerID  string `json:"serverId"`
	} `json:"peers"`
	MessagesSent       int64 `json:"messages_sent"`
	MessagesReceived   int64 `json:"messages_received"`
	MessagesDropped    int64 `json:"messages_dropped"`
	HandshakeFailures  int64 `json:"handshake_failures"`
	SignatureFailures  int64 `json:"signature_failures"`
	SequenceRejections int64 `json:"sequence_rejections"`
	OversizedFrames    int64 `json:"oversized_frames"`
}

// pausablePop is a pop answer that may carry paused (pop maintenance).
type pausablePop struct {
	popResponse
	Paused bool `json:"paused"`
}

func setPushMaint(t testing.TB, c doer, on bool) maintState {
	t.Helper()
	st := call[maintState](t, c, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": on}, 200)
	if st.MaintenanceMode != on {
		t.Fatalf("POST maintenance %v answered maintenanceMode %v", on, st.MaintenanceMode)
	}
	return st
}

func setPopMaint(t testing.TB, c doer, on bool) {
	t.Helper()
	st := call[popMaintState](t, c, "POST", "/api/v1/system/maintenance/pop", map[string]any{"enabled": on}, 200)
	if st.PopMaintenanceMode != on {
		t.Fatalf("POST maintenance/pop %v answered %+v", on, st)
	}
}

func buffers(t testing.TB, c doer) bufferStatus {
	t.Helper()
	return call[bufferStatus](t, c, "GET", "/api/v1/status/buffers", nil, 200)
}

func shared(t testing.TB, c doer) sharedStats {
	t.Helper()
	return call[sharedStats](t, c, "GET", "/internal/api/shared-state/stats", nil, 200)
}

// pushWant pushes items in one request, expecting the HTTP status and every item's status.
func pushWant(t testing.TB, c doer, status int, itemStatus string, items ...item) []pushResult {
	t.Helper()
	out := call[[]pushResult](t, c, "POST", "/api/v1/push", map[string]any{"items": items}, status)
	if len(out) != len(items) {
		t.Fatalf("push: %d results for %d items", len(out), len(items))
	}
	for i, r := range out {
		if r.Status != itemStatus {
			t.Fatalf("push item %d: status %q, want %q; answer %s", i, r.Status, itemStatus, fmtJSON(out))
		}
	}
	return out
}

// popWith pops with query parameters given as key/value pairs.
func popWith(t testing.TB, c doer, path string, kv ...string) pausablePop {
	t.Helper()
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	return call[pausablePop](t, c, "GET", path+"?"+q.Encode(), nil, 200)
}

// consumeAll pops (without waiting) and acks as group until a pop comes back empty, and returns
// the messages in delivery order.
func consumeAll(t testing.TB, c doer, queue, group string) []message {
	t.Helper()
	var out []message
	for {
		p := popWith(t, c, "/api/v1/pop/queue/"+queue, "batch", "100", "consumerGroup", group)
		if p.Paused {
			t.Fatalf("pop of %s answered paused", queue)
		}
		if len(p.Messages) == 0 {
			return out
		}
		out = append(out, p.Messages...)
		acks := make([]map[string]any, len(p.Messages))
		for i, m := range p.Messages {
			acks[i] = map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": "completed"}
		}
		res := call[[]ackResult](t, c, "POST", "/api/v1/ack/batch", map[string]any{"consumerGroup": group, "acknowledgments": acks}, 200)
		for _, r := range res {
			if !r.Success {
				t.Fatalf("ack of group %q: %+v", group, r)
			}
		}
	}
}

// seqPayload is the payload of a numbered message.
type seqPayload struct {
	P    string         `json:"p"`
	N    int            `json:"n"`
	Text string         `json:"text"`
	Obj  map[string]any `json:"obj"`
}

// numbered builds n items for queue spread over partitions round-robin, numbered from first,
// with payloads that exercise JSON (unicode, nesting, null, floats) and explicit transactionIds
// and traceIds, so the test can check the spool keeps them all.
func numbered(queue string, partitions []string, first, n int) []item {
	items := make([]item, n)
	for i := range items {
		k := first + i
		p := partitions[k%len(partitions)]
		items[i] = item{
			"queue": queue, "partition": p,
			"transactionId": fmt.Sprintf("%s-tx-%04d", queue, k),
			"traceId":       fmt.Sprintf("00000000-0000-4000-8000-%012d", k),
			"payload": map[string]any{
				"p": p, "n": k, "text": "snow ☃ \"quoted\" \\ " + strconv.Itoa(k),
				"obj": map[string]any{"list": []any{1, 2.5, nil, true, "x"}, "empty": map[string]any{}},
			},
		}
	}
	return items
}

// checkNumbered checks that msgs are exactly the items numbered first..first+n-1 of queue, each
// once, in push order within each partition, with payload, transactionId and traceId intact.
func checkNumbered(t testing.TB, who string, msgs []message, queue string, partitions []string, first, n int) {
	t.Helper()
	want := numbered(queue, partitions, first, n)
	seen := map[int]int{}
	last := map[string]int{}
	for _, m := range msgs {
		var p seqPayload
		if err := json.Unmarshal(m.Data, &p); err != nil {
			t.Errorf("%s: undecodable payload %s", who, m.Data)
			continue
		}
		seen[p.N]++
		if p.N < first || p.N >= first+n {
			t.Errorf("%s: unexpected message %s", who, m.Data)
			continue
		}
		if prev, ok := last[m.Partition]; ok && p.N <= prev {
			t.Errorf("%s: partition %s delivered %d after %d", who, m.Partition, p.N, prev)
		}
		last[m.Partition] = p.N
		w := want[p.N-first]
		if m.Partition != w["partition"] || p.P != w["partition"] {
			t.Errorf("%s: message %d in partition %s, pushed to %s", who, p.N, m.Partition, w["partition"])
		}
		if m.TransactionID != w["transactionId"] {
			t.Errorf("%s: message %d transactionId %q, pushed %q", who, p.N, m.TransactionID, w["transactionId"])
		}
		if str(m.TraceID) != w["traceId"] {
			t.Errorf("%s: message %d traceId %s, pushed %s", who, p.N, str(m.TraceID), w["traceId"])
		}
		wantJSON, _ := json.Marshal(w["payload"])
		var a, b any
		_ = json.Unmarshal(wantJSON, &a)
		_ = json.Unmarshal(m.Data, &b)
		if fmtJSON(a) != fmtJSON(b) {
			t.Errorf("%s: message %d payload %s, pushed %s", who, p.N, m.Data, wantJSON)
		}
	}
	for k := first; k < first+n; k++ {
		if seen[k] != 1 {
			t.Errorf("%s: message %d delivered %d times, want once", who, k, seen[k])
		}
	}
}

// countStored counts the messages of queue in PostgreSQL.
func countStored(t testing.TB, c *servertest.Client, queue string) int {
	t.Helper()
	var n int
	err := c.Broker.Store().Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
		 JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1`, queue).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Push maintenance: pushes go to the spool and answer 201 buffered; consumers keep draining
// what PostgreSQL holds and cannot see the spooled messages; the status routes count them;
// turning maintenance off drains the spool into PostgreSQL by itself, and every spooled message
// is then delivered once per consumer group, in push order per partition, intact.
func TestMaintenancePushSpoolsAndDrainsWhenTurnedOff(t *testing.T) {
	t.Parallel()
	c := startBroker(t, drainEvery(20*time.Millisecond))
	const queue = "maint"
	parts := []string{"p0", "p1", "p2"}
	groups := []string{"", "g1"}

	// Before maintenance: 6 messages in PostgreSQL.
	const before = 6
	pushWant(t, c, 200, "queued", numbered(queue, parts, 0, before)...)

	st := setPushMaint(t, c, true)
	if st.Message == "" {
		t.Errorf("POST maintenance answered no message: %+v", st)
	}
	const n = 30
	for k := before; k < before+n; k += 5 {
		res := pushWant(t, c, 201, "buffered", numbered(queue, parts, k, 5)...)
		for i, r := range res {
			if r.TransactionID != fmt.Sprintf("%s-tx-%04d", queue, k+i) {
				t.Errorf("buffered item %d: transaction_id %q", k+i, r.TransactionID)
			}
		}
	}

	// Consumers still get what PostgreSQL held, and nothing of the spool.
	for _, g := range groups {
		got := consumeAll(t, c, queue, g)
		checkNumbered(t, fmt.Sprintf("group %q during maintenance", g), got, queue, parts, 0, before)
	}
	if stored := countStored(t, c, queue); stored != before {
		t.Fatalf("%d messages in PostgreSQL during push maintenance, want %d", stored, before)
	}

	m := call[maintState](t, c, "GET", "/api/v1/system/maintenance", nil, 200)
	if !m.MaintenanceMode || m.BufferedMessages != n || m.PopMaintenanceMode == nil || *m.PopMaintenanceMode {
		t.Fatalf("GET maintenance: %+v, want maintenanceMode true, bufferedMessages %d", m, n)
	}
	b := buffers(t, c)
	if b.Pending != n || b.Files < 1 || b.Bytes <= 0 || !b.DBHealthy || b.Failed != 0 || b.OldestAgeSeconds < 0 {
		t.Fatalf("GET status/buffers: %+v, want pending %d", b, n)
	}
	// The spool is not drained behind maintenance's back, however many flush ticks pass.
	for range 5 {
		if p := popWith(t, c, "/api/v1/pop/queue/"+queue, "batch", "100"); len(p.Messages) != 0 {
			t.Fatalf("a spooled message was poppable during maintenance: %+v", p)
		}
	}
	if b := buffers(t, c); b.Pending != n {
		t.Fatalf("pending changed during maintenance: %+v", b)
	}

	off := time.Now()
	setPushMaint(t, c, false)
	// Pushes right after the switch, while the drain may still be running: they go to the
	// spool behind the records already there, or to PostgreSQL once it is empty, and either way
	// come after them.
	const late = 10
	for k := before + n; k < before+n+late; k += 5 {
		status, raw := c.Do("POST", "/api/v1/push", map[string]any{"items": numbered(queue, parts, k, 5)})
		var res []pushResult
		if (status != 200 && status != 201) || json.Unmarshal(raw, &res) != nil || len(res) != 5 {
			t.Fatalf("push right after maintenance off: %d %s", status, raw)
		}
		for _, r := range res {
			if r.Status != "queued" && r.Status != "buffered" {
				t.Fatalf("push right after maintenance off: %s", raw)
			}
		}
		t.Logf("push right after maintenance off answered %d (%s)", status, res[0].Status)
	}
	testkit.WaitFor(t, 30*time.Second, "the spool to drain", func() bool { return buffers(t, c).Pending == 0 })
	t.Logf("spool of %d records drained %v after maintenance was turned off", n, time.Since(off))

	for _, g := range groups {
		got := consumeAll(t, c, queue, g)
		checkNumbered(t, fmt.Sprintf("group %q after maintenance", g), got, queue, parts, before, n+late)
	}
	if stored := countStored(t, c, queue); stored != before+n+late {
		t.Fatalf("%d messages in PostgreSQL after the drain, want %d", stored, before+n+late)
	}
	if m := call[maintState](t, c, "GET", "/api/v1/system/maintenance", nil, 200); m.MaintenanceMode || m.BufferedMessages != 0 {
		t.Fatalf("GET maintenance after off: %+v", m)
	}
	// Pushes go to PostgreSQL again.
	pushWant(t, c, 200, "queued", numbered(queue, parts, before+n+late, 3)...)
	got := consumeAll(t, c, queue, "")
	checkNumbered(t, "queue mode after maintenance", got, queue, parts, before+n+late, 3)
}

// Pop maintenance: pops answer at once with paused and nothing, without a database pop; a
// parked long-poll is answered when it is turned on; pushes still go to PostgreSQL; off brings
// normal pops back.
func TestMaintenancePopPausesConsumers(t *testing.T) {
	t.Parallel()
	// The broker's own re-check of a parked pop comes only after ten minutes, and the long-polls
	// wait as long: turning pop maintenance on is the only thing that can answer one early.
	c := startBroker(t, rechecksEvery(10*time.Minute))
	const queue, idle = "popmaint", "popmaint-idle"
	const timeout = "600000"
	createQueue(t, c, queue, idle)

	type outcome struct {
		p   pausablePop
		at  time.Time
		err error
	}
	parkedPop := make(chan outcome, 1)
	go func() {
		status, raw := c.Do("GET", "/api/v1/pop/queue/"+idle+"?wait=true&batch=5&timeout="+timeout, nil)
		var o outcome
		o.at = time.Now()
		if status != 200 {
			o.err = fmt.Errorf("status %d: %s", status, raw)
		} else {
			o.err = json.Unmarshal(raw, &o.p)
		}
		parkedPop <- o
	}()
	waitFor(t, "the long-poll to park", func() bool { return parked(t, c, idle) == 1 })

	start := time.Now()
	setPopMaint(t, c, true)
	answered := time.Now()
	waitFor(t, "pop maintenance to answer the parked long-poll", func() bool { return parked(t, c, idle) == 0 })
	o := <-parkedPop
	if o.err != nil {
		t.Fatalf("parked pop: %v", o.err)
	}
	if !o.p.Paused || len(o.p.Messages) != 0 || !o.p.Success {
		t.Fatalf("parked pop under pop maintenance: %+v, want paused and no messages", o.p)
	}
	t.Logf("parked pop released %v after the POST was sent (%v after its answer)", o.at.Sub(start), o.at.Sub(answered))

	if st := call[popMaintState](t, c, "GET", "/api/v1/system/maintenance/pop", nil, 200); !st.PopMaintenanceMode {
		t.Fatalf("GET maintenance/pop: %+v", st)
	}
	if m := call[maintState](t, c, "GET", "/api/v1/system/maintenance", nil, 200); m.MaintenanceMode || m.PopMaintenanceMode == nil || !*m.PopMaintenanceMode {
		t.Fatalf("GET maintenance under pop maintenance: %+v", m)
	}

	// Pushes still reach PostgreSQL; pops see nothing, whether they wait or not, and none of
	// them reaches the database.
	pushWant(t, c, 200, "queued", numbered(queue, []string{"Default"}, 0, 3)...)
	queries := counter(t, c, "queen_pop_queries_total")
	for _, wait := range []string{"false", "true"} {
		t0 := time.Now()
		p := popWith(t, c, "/api/v1/pop/queue/"+queue, "batch", "10", "wait", wait, "timeout", timeout)
		if !p.Paused || len(p.Messages) != 0 {
			t.Fatalf("pop (wait=%s) under pop maintenance: %+v", wait, p)
		}
		t.Logf("pop (wait=%s) under pop maintenance answered in %v", wait, time.Since(t0))
	}
	if p := popWith(t, c, "/api/v1/pop/queue/"+queue+"/partition/Default", "batch", "10", "consumerGroup", "g"); !p.Paused || len(p.Messages) != 0 {
		t.Fatalf("partition pop of a group under pop maintenance: %+v", p)
	}
	if n := counter(t, c, "queen_pop_queries_total") - queries; n != 0 {
		t.Fatalf("pops under pop maintenance ran %d database pops", n)
	}

	setPopMaint(t, c, false)
	if st := call[popMaintState](t, c, "GET", "/api/v1/system/maintenance/pop", nil, 200); st.PopMaintenanceMode {
		t.Fatalf("GET maintenance/pop after off: %+v", st)
	}
	p := popWith(t, c, "/api/v1/pop/queue/"+queue, "batch", "10", "autoAck", "true")
	if p.Paused {
		t.Fatalf("pop after pop maintenance off answered paused: %+v", p)
	}
	checkNumbered(t, "after pop maintenance", p.Messages, queue, []string{"Default"}, 0, 3)
}

// A flag that is not a JSON boolean is refused, and changes nothing.
func TestMaintenanceRefusesNonBooleanFlags(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	for _, path := range []string{"/api/v1/system/maintenance", "/api/v1/system/maintenance/pop"} {
		for _, body := range []string{`{"enabled":"yes"}`, `{"enabled":"true"}`, `{"enabled":1}`, `{"enabled":null}`, `{}`, `not json`} {
			status, raw := c.Do("POST", path, body)
			var e struct {
				Error string `json:"error"`
			}
			if status != 400 || json.Unmarshal(raw, &e) != nil || e.Error == "" {
				t.Errorf("POST %s %s: %d %s, want 400 with an error", path, body, status, raw)
			}
		}
	}
	if m := call[maintState](t, c, "GET", "/api/v1/system/maintenance", nil, 200); m.MaintenanceMode || m.PopMaintenanceMode == nil || *m.PopMaintenanceMode {
		t.Fatalf("a refused request changed the flags: %+v", m)
	}
	pushWant(t, c, 200, "queued", item{"queue": "refused-flags", "payload": 1})
}

// A broker restarted on the same database and spool directory while push and pop maintenance
// are on comes back in both (before anything re-reads the flags), still holds the records
// spooled before the restart, and drains them with the new ones once push maintenance is off.
func TestMaintenanceSurvivesRestart(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	spoolDir := t.TempDir()
	env := func(c *config.Config) {
		c.SpoolDir, c.SpoolFlush = spoolDir, 20*time.Millisecond
		// Only the boot may restore the flag in this test, not the periodic re-read.
		c.FlagsRefresh = time.Hour
	}
	const queue = "restart"
	parts := []string{"a", "b"}

	first := servertest.Start(t, db, env)
	setPushMaint(t, first, true)
	const n1 = 12
	for k := 0; k < n1; k += 4 {
		pushWant(t, first, 201, "buffered", numbered(queue, parts, k, 4)...)
	}
	setPopMaint(t, first, true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := first.Broker.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	second := servertest.Start(t, db, env)
	if s := shared(t, second); !s.MaintenanceMode || !s.PopMaintenanceMode {
		t.Fatalf("restarted broker is not in push and pop maintenance: %+v", s)
	}
	if p := popWith(t, second, "/api/v1/pop/queue/"+queue, "batch", "100"); !p.Paused {
		t.Fatalf("pop on the restarted broker: %+v, want paused", p)
	}
	setPopMaint(t, second, false)
	if b := buffers(t, second); b.Pending != n1 {
		t.Fatalf("restarted broker's spool: %+v, want %d pending", b, n1)
	}
	const n2 = 4
	pushWant(t, second, 201, "buffered", numbered(queue, parts, n1, n2)...)
	if p := popWith(t, second, "/api/v1/pop/queue/"+queue, "batch", "100"); len(p.Messages) != 0 {
		t.Fatalf("spooled messages poppable during maintenance after restart: %+v", p)
	}
	if stored := countStored(t, second, queue); stored != 0 {
		t.Fatalf("%d messages reached PostgreSQL during maintenance", stored)
	}

	setPushMaint(t, second, false)
	testkit.WaitFor(t, 30*time.Second, "the spool to drain", func() bool { return buffers(t, second).Pending == 0 })
	for _, g := range []string{"", "after-restart"} {
		checkNumbered(t, fmt.Sprintf("group %q", g), consumeAll(t, second, queue, g), queue, parts, 0, n1+n2)
	}
	if stored := countStored(t, second, queue); stored != n1+n2 {
		t.Fatalf("%d messages stored, want %d", stored, n1+n2)
	}
}

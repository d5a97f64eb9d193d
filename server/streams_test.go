package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"queen/auth"
	"queen/persistence"
	"queen/pg/pgtest"
	"queen/server/servertest"
	"queen/testkit"
)

// The tests of this file play what the streaming SDKs' runners do against a real broker:
// register a query, pop its source with the group streams.<queryId>, run a tumbling-window count
// in the client, commit each batch as one cycle, and flush the ripe windows when idle.

// streamAPI calls the broker without failing the test itself, so runners can run in
// goroutines; the sequential tests wrap it in must.
type streamAPI struct {
	base   string
	header http.Header
	http   *http.Client
}

func newStreamAPI(c *servertest.Client, header ...string) *streamAPI {
	return streamAPIAt(c.Base, header...)
}

// streamAPIAt calls the broker at base, sending the header pairs on every request.
func streamAPIAt(base string, header ...string) *streamAPI {
	h := http.Header{}
	for i := 0; i+1 < len(header); i += 2 {
		h.Set(header[i], header[i+1])
	}
	return &streamAPI{base: base, header: h, http: &http.Client{Timeout: time.Minute}}
}

// call sends body as JSON and decodes the answer into out; it fails on another status.
func (a *streamAPI) call(method, path string, body any, want int, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.base+path, r)
	if err != nil {
		return err
	}
	for k, v := range a.header {
		req.Header[k] = v
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, want, raw)
	}
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%s %s: cannot decode %s: %v", method, path, raw, err)
		}
	}
	return nil
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type registered struct {
	Success    bool   `json:"success"`
	QueryID    string `json:"query_id"`
	Name       string `json:"name"`
	ConfigHash string `json:"config_hash"`
	Fresh      bool   `json:"fresh"`
	Reset      bool   `json:"reset"`
	Error      string `json:"error"`
}

type cycleAnswer struct {
	Success         bool         `json:"success"`
	Error           string       `json:"error"`
	QueryID         string       `json:"query_id"`
	PartitionID     string       `json:"partition_id"`
	QueueName       *string      `json:"queueName"`
	StateOpsApplied int          `json:"state_ops_applied"`
	PushResults     []pushResult `json:"push_results"`
	AckResult       *struct {
		Success       bool `json:"success"`
		Count         int  `json:"count"`
		LeaseReleased bool `json:"lease_released"`
		DLQ           bool `json:"dlq"`
	} `json:"ack_result"`
}

type stateRow struct {
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value"`
	UpdatedAt string          `json:"updated_at"`
}

// query is a registered stream query as a runner holds it.
type query struct {
	api                *streamAPI
	id, group          string
	source, sink, name string
}

func registerQuery(t testing.TB, api *streamAPI, name, source, sink, hash string) *query {
	t.Helper()
	var r registered
	must(t, api.call("POST", "/streams/v1/queries", map[string]any{
		"name": name, "source_queue": source, "sink_queue": sink, "config_hash": hash, "reset": false,
	}, 200, &r))
	if !r.Success || r.QueryID == "" || !r.Fresh {
		t.Fatalf("register %s: %+v", name, r)
	}
	return &query{api: api, id: r.QueryID, group: "streams." + r.QueryID, source: source, sink: sink, name: name}
}

func (q *query) cycle(body map[string]any) (cycleAnswer, error) {
	body["query_id"] = q.id
	var out cycleAnswer
	err := q.api.call("POST", "/streams/v1/cycle", body, 200, &out)
	return out, err
}

func (q *query) state(pid string, filter map[string]any) ([]stateRow, error) {
	body := map[string]any{"query_id": q.id, "partition_id": pid}
	for k, v := range filter {
		body[k] = v
	}
	var out struct {
		Success bool       `json:"success"`
		Rows    []stateRow `json:"rows"`
	}
	if err := q.api.call("POST", "/streams/v1/state/get", body, 200, &out); err != nil {
		return nil, err
	}
	if !out.Success || out.Rows == nil {
		return nil, fmt.Errorf("state/get: success %v, rows %v", out.Success, out.Rows)
	}
	return out.Rows, nil
}

// popSource pops one batch of the query's source for its group, long-polling up to wait.
func (q *query) popSource(batch int, wait time.Duration, path string) (popResponse, error) {
	v := url.Values{"consumerGroup": {q.group}, "batch": {fmt.Sprint(batch)}}
	if wait > 0 {
		v.Set("wait", "true")
		v.Set("timeout", fmt.Sprint(wait.Milliseconds()))
	}
	if path == "" {
		path = "/api/v1/pop/queue/" + q.source
	}
	var out popResponse
	err := q.api.call("GET", path+"?"+v.Encode(), nil, 200, &out)
	return out, err
}

// The tumbling window the runners count in: event time t (the payload's "t") falls in the
// window [t/windowSize*windowSize, +windowSize).
const windowSize = 10

type tumbleWindow struct {
	Count     int   `json:"count"`
	WindowEnd int64 `json:"windowEnd"`
}

// windowKey orders windows by start: the state rows come back in key order.
func windowKey(start int64) string { return fmt.Sprintf("tumble\x1f%08d", start) }

// countBatch is one runner cycle over a popped batch: read the partition's open windows, count
// the batch into them, emit and delete the windows the batch's event time has passed, keep the
// others, and acknowledge the batch (releasing the lease unless keep).
func (q *query) countBatch(p popResponse, msgs []message) (cycleAnswer, error) {
	pid := *p.PartitionID
	rows, err := q.state(pid, map[string]any{"key_prefix": "tumble\x1f"})
	if err != nil {
		return cycleAnswer{}, err
	}
	windows, err := decodeWindows(rows)
	if err != nil {
		return cycleAnswer{}, err
	}
	var maxT int64 = -1
	for _, m := range msgs {
		var ev struct {
			T int64 `json:"t"`
		}
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			return cycleAnswer{}, err
		}
		start := ev.T / windowSize * windowSize
		if windows[start] == nil {
			windows[start] = &tumbleWindow{WindowEnd: start + windowSize}
		}
		windows[start].Count++
		maxT = max(maxT, ev.T)
	}
	ops, sink := q.closeWindows(windows, p.Partition, maxT)
	last := msgs[len(msgs)-1]
	return q.cycle(map[string]any{
		"partition_id": pid, "consumer_group": q.group, "state_ops": ops, "push_items": sink,
		"ack": map[string]any{"transactionId": last.TransactionID, "leaseId": last.LeaseID, "status": "completed", "count": len(msgs)},
	})
}

// decodeWindows reads window state rows, keyed by the window's start.
func decodeWindows(rows []stateRow) (map[int64]*tumbleWindow, error) {
	windows := map[int64]*tumbleWindow{}
	for _, r := range rows {
		var w tumbleWindow
		if err := json.Unmarshal(r.Value, &w); err != nil {
			return nil, err
		}
		windows[w.WindowEnd-windowSize] = &w
	}
	return windows, nil
}

// closeWindows emits the windows whose end is at or before watermark to the sink (each with a
// transactionId of its own, so a window emitted twice would show twice) and deletes them; the
// others are upserted.
func (q *query) closeWindows(windows map[int64]*tumbleWindow, partition string, watermark int64) (ops, sink []map[string]any) {
	starts := make([]int64, 0, len(windows))
	for s := range windows {
		starts = append(starts, s)
	}
	slices.Sort(starts)
	ops, sink = []map[string]any{}, []map[string]any{}
	for _, s := range starts {
		w := windows[s]
		if w.WindowEnd <= watermark {
			sink = append(sink, map[string]any{"queue": q.sink, "partition": partition, "transactionId": uuid.NewString(),
				"payload": map[string]any{"partition": partition, "window": s, "count": w.Count}})
			ops = append(ops, map[string]any{"type": "delete", "key": windowKey(s)})
			continue
		}
		ops = append(ops, map[string]any{"type": "upsert", "key": windowKey(s), "value": w})
	}
	return ops, sink
}

// flush is the idle flush: the windows ripe at watermark, read with key_prefix and
// ripe_at_or_before, emitted and deleted in a cycle that acknowledges nothing.
func (q *query) flush(pid, partition string, watermark int64) (cycleAnswer, error) {
	rows, err := q.state(pid, map[string]any{"key_prefix": "tumble\x1f", "ripe_at_or_before": watermark})
	if err != nil {
		return cycleAnswer{}, err
	}
	windows, err := decodeWindows(rows)
	if err != nil {
		return cycleAnswer{}, err
	}
	ops, sink := q.closeWindows(windows, partition, watermark)
	return q.cycle(map[string]any{"partition_id": pid, "consumer_group": q.group, "state_ops": ops, "push_items": sink})
}

// pushEvents pushes perPartition events with t = 0.. to each partition of the source.
func pushEvents(t *testing.T, c *servertest.Client, source string, partitions, perPartition int) {
	t.Helper()
	var items []item
	for p := range partitions {
		for i := range perPartition {
			items = append(items, item{"queue": source, "partition": fmt.Sprintf("p%d", p), "payload": map[string]any{"t": i}})
		}
	}
	push(t, c, items...)
}

// checkWindowTotals pops the whole sink and fails unless it holds exactly one message per
// (partition, window) with the count windowSize.
func checkWindowTotals(t *testing.T, c *servertest.Client, sink string, partitions, perPartition int) {
	t.Helper()
	seen := map[string]int{}
	for {
		p := pop(t, c, "/api/v1/pop/queue/"+sink, "batch", "1000")
		if len(p.Messages) == 0 {
			break
		}
		for _, m := range p.Messages {
			var w struct {
				Partition string `json:"partition"`
				Window    int64  `json:"window"`
				Count     int    `json:"count"`
			}
			if err := json.Unmarshal(m.Data, &w); err != nil {
				t.Fatal(err)
			}
			key := fmt.Sprintf("%s/%d", w.Partition, w.Window)
			if _, dup := seen[key]; dup {
				t.Errorf("window %s emitted twice", key)
			}
			seen[key] = w.Count
		}
		ackAll(t, c, "", p.Messages)
	}
	want := partitions * perPartition / windowSize
	if len(seen) != want {
		t.Errorf("sink holds %d windows, want %d: %v", len(seen), want, seen)
	}
	for k, n := range seen {
		if n != windowSize {
			t.Errorf("window %s counted %d events, want %d", k, n, windowSize)
		}
	}
}

// A tumbling-window count over a source of four partitions reaches exactly the expected totals
// in the sink, though the runner abandons batches now and then (a consumer killed between
// pop and cycle: the lease expires and the batch is redelivered) and commits a cycle on a
// lease that expired (refused whole: no state, no sink message, no ack).
func TestStreamWindowCountSurvivesKilledConsumers(t *testing.T) {
	t.Parallel()
	c := startBroker(t, rechecksEvery(50*time.Millisecond))
	c.JSON("POST", "/api/v1/configure", map[string]any{"queue": "clicks", "options": map[string]any{"leaseTime": 1}}, 200, nil)
	const partitions, perPartition = 4, 60
	pushEvents(t, c, "clicks", partitions, perPartition)
	api := newStreamAPI(c)
	q := registerQuery(t, api, "clicks.per_window", "clicks", "clicks.windows", "sha256:v1")

	// A stale cycle: a batch popped, its lease left to expire and the batch popped again.
	first, err := q.popSource(7, 0, "/api/v1/pop/queue/clicks/partition/p0")
	must(t, err)
	if len(first.Messages) != 7 {
		t.Fatalf("first pop: %d messages", len(first.Messages))
	}
	var again popResponse
	waitFor(t, "the abandoned batch to be redelivered", func() bool {
		again, err = q.popSource(7, time.Second, "/api/v1/pop/queue/clicks/partition/p0")
		must(t, err)
		return len(again.Messages) > 0
	})
	if payloads(again.Messages)[0] != payloads(first.Messages)[0] || *again.LeaseID == *first.LeaseID {
		t.Fatalf("redelivery: %v lease %s, first %v lease %s", payloads(again.Messages), *again.LeaseID, payloads(first.Messages), *first.LeaseID)
	}
	stale, err := q.countBatch(first, first.Messages)
	must(t, err)
	if stale.Success || !strings.Contains(stale.Error, "lease") || stale.AckResult != nil || len(stale.PushResults) != 0 {
		t.Fatalf("a cycle on an expired lease: %+v", stale)
	}
	if rows, err := q.state(*first.PartitionID, nil); err != nil || len(rows) != 0 {
		t.Fatalf("state after a refused cycle: %v %v", rows, err)
	}
	ok, err := q.countBatch(again, again.Messages)
	must(t, err)
	if !ok.Success || ok.AckResult == nil || !ok.AckResult.LeaseReleased || ok.AckResult.Count != 7 || ok.StateOpsApplied != 1 || str(ok.QueueName) != "clicks" {
		t.Fatalf("the current holder's cycle: %+v", ok)
	}

	// The runner: every fifth batch is abandoned, three times in all.
	partitionIDs := map[string]string{}
	abandoned, batches := 0, 0
	for done := 7; done < partitions*perPartition; {
		p, err := q.popSource(9, 2*time.Second, "")
		must(t, err)
		if len(p.Messages) == 0 {
			continue
		}
		partitionIDs[*p.PartitionID] = p.Partition
		batches++
		if batches%5 == 0 && abandoned < 3 {
			abandoned++
			continue
		}
		ans, err := q.countBatch(p, p.Messages)
		must(t, err)
		if !ans.Success {
			t.Fatalf("cycle: %+v", ans)
		}
		done += len(p.Messages)
	}
	if abandoned != 3 {
		t.Fatalf("abandoned %d batches, want 3", abandoned)
	}
	// Idle: the last window of each partition is ripe once the watermark reaches its end.
	for pid, name := range partitionIDs {
		early, err := q.flush(pid, name, perPartition-1)
		must(t, err)
		if !early.Success || len(early.PushResults) != 0 {
			t.Fatalf("flush before the last window is ripe: %+v", early)
		}
		ans, err := q.flush(pid, name, perPartition)
		must(t, err)
		if !ans.Success || len(ans.PushResults) != 1 || ans.PushResults[0].Status != "queued" || ans.AckResult != nil {
			t.Fatalf("flush of %s: %+v", name, ans)
		}
		if rows, err := q.state(pid, nil); err != nil || len(rows) != 0 {
			t.Fatalf("state of %s after the flush: %v %v", name, rows, err)
		}
	}
	checkWindowTotals(t, c, "clicks.windows", partitions, perPartition)
}

// Two runners on one partition: the partition's lease gives a batch to one of them at a time,
// a cycle is serialised with the other's, and a runner whose lease went to the other commits
// nothing. Every event is counted exactly once.
func TestStreamTwoRunnersOnOnePartition(t *testing.T) {
	t.Parallel()
	c := startBroker(t, rechecksEvery(20*time.Millisecond))
	c.JSON("POST", "/api/v1/configure", map[string]any{"queue": "taps", "options": map[string]any{"leaseTime": 2}}, 200, nil)
	const perPartition = 200
	pushEvents(t, c, "taps", 1, perPartition)
	q := registerQuery(t, newStreamAPI(c), "taps.per_window", "taps", "taps.windows", "sha256:v1")

	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	var pid, name atomic.Value
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done.Load() < perPartition {
				p, err := q.popSource(3, 200*time.Millisecond, "")
				if err != nil {
					errs <- err
					return
				}
				if len(p.Messages) == 0 {
					continue
				}
				pid.Store(*p.PartitionID)
				name.Store(p.Partition)
				ans, err := q.countBatch(p, p.Messages)
				if err != nil {
					errs <- err
					return
				}
				if ans.Success {
					done.Add(int64(len(p.Messages)))
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if done.Load() != perPartition {
		t.Fatalf("runners acknowledged %d events, want %d", done.Load(), perPartition)
	}
	ans, err := q.flush(pid.Load().(string), name.Load().(string), perPartition)
	must(t, err)
	if !ans.Success {
		t.Fatalf("flush: %+v", ans)
	}
	checkWindowTotals(t, c, "taps.windows", 1, perPartition)
}

// Gate mode: a cycle acknowledges the head of a batch with release_lease:false. The lease
// stays (no other pop gets the partition) and, once it expires, exactly the unacknowledged tail
// is delivered again.
func TestStreamGateRedeliversOnlyTheTail(t *testing.T) {
	t.Parallel()
	c := startBroker(t, rechecksEvery(50*time.Millisecond))
	c.JSON("POST", "/api/v1/configure", map[string]any{"queue": "requests", "options": map[string]any{"leaseTime": 1}}, 200, nil)
	var items []item
	for i := range 10 {
		items = append(items, item{"queue": "requests", "payload": map[string]any{"t": i}})
	}
	push(t, c, items...)
	q := registerQuery(t, newStreamAPI(c), "requests.gate", "requests", "requests.approved", "sha256:gate")
	p, err := q.popSource(10, 0, "")
	must(t, err)
	if len(p.Messages) != 10 {
		t.Fatalf("pop: %d messages", len(p.Messages))
	}
	head := p.Messages[:4]
	sink := []map[string]any{}
	for _, m := range head {
		sink = append(sink, map[string]any{"queue": "requests.approved", "payload": m.Data, "transactionId": m.TransactionID})
	}
	ans, err := q.cycle(map[string]any{
		"partition_id": *p.PartitionID, "consumer_group": q.group, "push_items": sink,
		"state_ops":     []map[string]any{{"type": "upsert", "key": "gate\x1ftokens", "value": map[string]any{"tokens": 0}}},
		"ack":           map[string]any{"transactionId": head[3].TransactionID, "leaseId": head[3].LeaseID, "status": "completed", "count": 4},
		"release_lease": false,
	})
	must(t, err)
	if !ans.Success || ans.AckResult == nil || ans.AckResult.LeaseReleased || len(ans.PushResults) != 4 {
		t.Fatalf("gate cycle: %+v", ans)
	}
	if now, err := q.popSource(10, 0, ""); err != nil || len(now.Messages) != 0 {
		t.Fatalf("a pop while the gate keeps the lease: %v %v", payloads(now.Messages), err)
	}
	var tail popResponse
	waitFor(t, "the tail after the kept lease expires", func() bool {
		tail, err = q.popSource(10, time.Second, "")
		must(t, err)
		return len(tail.Messages) > 0
	})
	if got, want := payloads(tail.Messages), payloads(p.Messages[4:]); !slices.Equal(got, want) {
		t.Fatalf("redelivered %v, want exactly the tail %v", got, want)
	}
	approved := pop(t, c, "/api/v1/pop/queue/requests.approved", "batch", "100")
	if got, want := payloads(approved.Messages), payloads(head); !slices.Equal(got, want) {
		t.Fatalf("sink %v, want %v", got, want)
	}
}

// state/get returns exactly the rows asked for, in key order: by keys, by key_prefix, and with
// ripe_at_or_before only those whose value.windowEnd is a number at most the bound.
func TestStreamStateGetFilters(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	push(t, c, item{"queue": "metrics", "payload": 1})
	q := registerQuery(t, newStreamAPI(c), "metrics.windows", "metrics", "", "h1")
	p := pop(t, c, "/api/v1/pop/queue/metrics", "consumerGroup", q.group)
	pid := *p.PartitionID
	ops := []map[string]any{
		{"type": "upsert", "key": "tumble\x1f3000", "value": map[string]any{"windowEnd": 3000}},
		{"type": "upsert", "key": "tumble\x1f1000", "value": map[string]any{"windowEnd": 1000}},
		{"type": "upsert", "key": "tumble\x1f2000", "value": map[string]any{"windowEnd": 2000.0}},
		{"type": "upsert", "key": "tumble\x1fstring", "value": map[string]any{"windowEnd": "1000"}},
		{"type": "upsert", "key": "tumble\x1fnone", "value": map[string]any{"sum": 1}},
		{"type": "upsert", "key": "sliding\x1f500", "value": map[string]any{"windowEnd": 500}},
		{"type": "upsert", "key": "gone", "value": 1},
		{"type": "delete", "key": "gone"},
		{"type": "upsert", "key": "tumble_x", "value": map[string]any{"windowEnd": 1}},
	}
	ans, err := q.cycle(map[string]any{"partition_id": pid, "state_ops": ops})
	must(t, err)
	if !ans.Success || ans.StateOpsApplied != len(ops) {
		t.Fatalf("cycle: %+v", ans)
	}
	keys := func(filter map[string]any) []string {
		rows, err := q.state(pid, filter)
		must(t, err)
		out := []string{}
		for _, r := range rows {
			out = append(out, r.Key)
			if _, err := time.Parse("2006-01-02T15:04:05.000000+00:00", r.UpdatedAt); err != nil {
				t.Fatalf("updated_at %q: %v", r.UpdatedAt, err)
			}
		}
		return out
	}
	for _, tc := range []struct {
		filter map[string]any
		want   []string
	}{
		{nil, []string{"sliding\x1f500", "tumble\x1f1000", "tumble\x1f2000", "tumble\x1f3000", "tumble\x1fnone", "tumble\x1fstring", "tumble_x"}},
		{map[string]any{"keys": []string{"tumble\x1f2000", "sliding\x1f500", "absent"}}, []string{"sliding\x1f500", "tumble\x1f2000"}},
		{map[string]any{"key_prefix": "tumble\x1f"}, []string{"tumble\x1f1000", "tumble\x1f2000", "tumble\x1f3000", "tumble\x1fnone", "tumble\x1fstring"}},
		{map[string]any{"key_prefix": "tumble\x1f", "ripe_at_or_before": 2000}, []string{"tumble\x1f1000", "tumble\x1f2000"}},
		{map[string]any{"key_prefix": "tumble\x1f", "ripe_at_or_before": 999}, []string{}},
		{map[string]any{"ripe_at_or_before": 1000}, []string{"sliding\x1f500", "tumble\x1f1000", "tumble_x"}},
		{map[string]any{"key_prefix": "%"}, []string{}}, // a prefix, not a LIKE pattern
	} {
		if got := keys(tc.filter); !slices.Equal(got, tc.want) {
			t.Errorf("state/get %v: %q, want %q", tc.filter, got, tc.want)
		}
	}
	// Another partition's state is its own.
	other := uuid.NewString()
	if rows, err := q.state(other, nil); err != nil || len(rows) != 0 {
		t.Fatalf("state of another partition: %v %v", rows, err)
	}
}

// A changed config_hash is a 409 with the hint both SDKs show; reset:true wipes the state and
// adopts the new hash; the same hash again updates nothing else.
func TestStreamQueryConfigHashConflictAndReset(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	api := newStreamAPI(c)
	push(t, c, item{"queue": "orders", "payload": 1})
	q := registerQuery(t, api, "orders.totals", "orders", "orders.out", "sha256:a")
	p := pop(t, c, "/api/v1/pop/queue/orders", "consumerGroup", q.group)
	ans, err := q.cycle(map[string]any{"partition_id": *p.PartitionID,
		"state_ops": []map[string]any{{"type": "upsert", "key": "k", "value": map[string]any{"sum": 42}}}})
	must(t, err)
	if !ans.Success {
		t.Fatalf("cycle: %+v", ans)
	}

	var same registered
	must(t, api.call("POST", "/streams/v1/queries", map[string]any{"name": "orders.totals", "source_queue": "orders", "sink_queue": "orders.out", "config_hash": "sha256:a"}, 200, &same))
	if !same.Success || same.Fresh || same.Reset || same.QueryID != q.id {
		t.Fatalf("same hash: %+v", same)
	}
	var conflict registered
	must(t, api.call("POST", "/streams/v1/queries", map[string]any{"name": "orders.totals", "source_queue": "orders", "config_hash": "sha256:b"}, 409, &conflict))
	if conflict.Success || conflict.QueryID != q.id || !strings.Contains(conflict.Error, "Pass reset:true") || !strings.Contains(conflict.Error, "'orders.totals'") {
		t.Fatalf("conflict: %+v", conflict)
	}
	if rows, err := q.state(*p.PartitionID, nil); err != nil || len(rows) != 1 || string(rows[0].Value) != `{"sum":42}` {
		t.Fatalf("state after a conflict: %+v %v", rows, err)
	}
	var reset registered
	must(t, api.call("POST", "/streams/v1/queries", map[string]any{"name": "orders.totals", "source_queue": "orders", "config_hash": "sha256:b", "reset": true}, 200, &reset))
	if !reset.Success || !reset.Reset || reset.Fresh || reset.QueryID != q.id || reset.ConfigHash != "sha256:b" {
		t.Fatalf("reset: %+v", reset)
	}
	if rows, err := q.state(*p.PartitionID, nil); err != nil || len(rows) != 0 {
		t.Fatalf("state after a reset: %+v %v", rows, err)
	}
	must(t, api.call("POST", "/streams/v1/queries", map[string]any{"name": "orders.totals", "source_queue": "orders", "config_hash": "sha256:b"}, 200, &same))
	if !same.Success || same.Reset {
		t.Fatalf("the new hash again: %+v", same)
	}
}

// Deleting a query (admin) deletes its state and its group's cursors; the retention job deletes
// the state of source partitions that no longer exist; the metrics show each query's state.
func TestStreamStateLifecycle(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	api := newStreamAPI(c)
	push(t, c, item{"queue": "events", "partition": "a", "payload": 1}, item{"queue": "events", "partition": "b", "payload": 2})
	q := registerQuery(t, api, "events.keep", "events", "", "h")
	pids := map[string]string{}
	for range 2 {
		p := pop(t, c, "/api/v1/pop/queue/events", "consumerGroup", q.group)
		pids[p.Partition] = *p.PartitionID
		m := p.Messages[0]
		ans, err := q.cycle(map[string]any{"partition_id": *p.PartitionID, "consumer_group": q.group,
			"state_ops": []map[string]any{{"type": "upsert", "key": "x", "value": map[string]any{"v": 1}}, {"type": "upsert", "key": "y", "value": 2}},
			"ack":       map[string]any{"transactionId": m.TransactionID, "leaseId": m.LeaseID}})
		must(t, err)
		if !ans.Success {
			t.Fatalf("cycle: %+v", ans)
		}
	}
	must(t, c.Broker.RefreshMetrics(t.Context()))
	_, page := c.Do("GET", "/metrics/prometheus", nil)
	if !bytes.Contains(page, []byte(`queen_stream_state_rows{query="events.keep"} 4`)) {
		t.Fatalf("metrics page lacks the state rows of events.keep:\n%s", grepLines(page, "queen_stream_state"))
	}

	// Partition b goes (a queue delete would do the same); the retention job cleans its state.
	_, err := c.Broker.Store().Pool().Exec(t.Context(), `DELETE FROM queen.partitions WHERE id = $1`, pids["b"])
	must(t, err)
	rep, err := c.Broker.Store().RunRetention(t.Context(), persistence.RetentionOptions{})
	must(t, err)
	if rep.StreamState != 2 {
		t.Fatalf("retention deleted %d state rows of the deleted partition, want 2", rep.StreamState)
	}
	if rows, err := q.state(pids["b"], nil); err != nil || len(rows) != 0 {
		t.Fatalf("state of a deleted partition after retention: %v %v", rows, err)
	}
	if rows, err := q.state(pids["a"], nil); err != nil || len(rows) != 2 {
		t.Fatalf("state of a live partition after retention: %v %v", rows, err)
	}

	// Delete: admin only when JWT is on (see TestStreamAccessLevels); here JWT is off.
	var del struct {
		Success   bool  `json:"success"`
		StateRows int64 `json:"state_rows_deleted"`
		Cursors   int64 `json:"cursors_deleted"`
	}
	must(t, api.call("DELETE", "/streams/v1/queries/events.keep", nil, 200, &del))
	if !del.Success || del.StateRows != 2 || del.Cursors != 1 {
		t.Fatalf("delete: %+v", del)
	}
	must(t, api.call("DELETE", "/streams/v1/queries/events.keep", nil, 404, nil))
	if rows, err := q.state(pids["a"], nil); err != nil || len(rows) != 0 {
		t.Fatalf("state after the delete: %v %v", rows, err)
	}
	var n int
	must(t, c.Broker.Store().Pool().QueryRow(t.Context(), `SELECT count(*) FROM queen.partition_consumers WHERE consumer_group = $1`, q.group).Scan(&n))
	if n != 0 {
		t.Fatalf("%d cursors of %s left", n, q.group)
	}
	ans, err := q.cycle(map[string]any{"partition_id": pids["a"]})
	must(t, err)
	if ans.Success || ans.Error != "query_id not found" {
		t.Fatalf("a cycle of a deleted query: %+v", ans)
	}
	must(t, c.Broker.RefreshMetrics(t.Context()))
	if _, page := c.Do("GET", "/metrics/prometheus", nil); bytes.Contains(page, []byte(`query="events.keep"`)) {
		t.Fatalf("a deleted query keeps its series:\n%s", grepLines(page, "queen_stream_state"))
	}
}

func grepLines(page []byte, substr string) string {
	var out []string
	for _, l := range strings.Split(string(page), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Sink pushes are pushes: partition creation, dedup by transactionId, sequence order, the
// token's sub as producerSub (whatever the body says), sealing for an encrypted sink queue, and
// a wake-up of a pop parked on the sink.
func TestStreamSinkPushesAreWritePaths(t *testing.T) {
	t.Parallel()
	const secret = "streams-sink-secret-0123456789abcdef"
	c := startBroker(t, withJWT(func(j *auth.Config) { j.Secret = secret }), withKey, rechecksEvery(time.Hour))
	token := testkit.SignJWT(t, jwt.SigningMethodHS256, []byte(secret), "", jwt.MapClaims{"sub": "stream-runner", "role": "read-write", "exp": time.Now().Add(time.Hour).Unix()})
	api := newStreamAPI(c, "Authorization", "Bearer "+token)
	admin := c.WithHeader("Authorization", "Bearer "+testkit.SignJWT(t, jwt.SigningMethodHS256, []byte(secret), "", jwt.MapClaims{"role": "admin", "exp": time.Now().Add(time.Hour).Unix()}))
	admin.JSON("POST", "/api/v1/configure", map[string]any{"queue": "sealed.out", "options": map[string]any{"encryptionEnabled": true}}, 200, nil)
	admin.JSON("POST", "/api/v1/configure", map[string]any{"queue": "plain.out"}, 200, nil)
	push(t, admin, item{"queue": "src", "payload": 1})
	q := registerQuery(t, api, "src.fanout", "src", "plain.out", "h")
	p, err := q.popSource(1, 0, "")
	must(t, err)

	parked := make(chan popResponse, 1)
	go func() {
		var out popResponse
		if err := api.call("GET", "/api/v1/pop/queue/plain.out?wait=true&timeout=30000&batch=10", nil, 200, &out); err != nil {
			t.Error(err)
		}
		parked <- out
	}()
	waitFor(t, "the sink pop to park", func() bool { return parkedOn(t, admin, "plain.out") == 1 })

	m := p.Messages[0]
	ans, err := q.cycle(map[string]any{"partition_id": *p.PartitionID, "consumer_group": q.group,
		"push_items": []map[string]any{
			{"queue": "plain.out", "partition": "new-one", "payload": map[string]any{"n": 1}, "transactionId": "out-1", "producerSub": "mallory"},
			{"queue": "plain.out", "partition": "new-one", "payload": map[string]any{"n": 2}, "transactionId": "out-2"},
			{"queue": "plain.out", "partition": "new-one", "payload": map[string]any{"n": 1}, "transactionId": "out-1"},
			{"queue": "sealed.out", "payload": map[string]any{"secret": "the-marker"}, "transactionId": "sealed-1"},
		},
		"ack": map[string]any{"transactionId": m.TransactionID, "leaseId": m.LeaseID}})
	must(t, err)
	if !ans.Success || len(ans.PushResults) != 4 {
		t.Fatalf("cycle: %+v", ans)
	}
	if got := []string{ans.PushResults[0].Status, ans.PushResults[1].Status, ans.PushResults[2].Status, ans.PushResults[3].Status}; !slices.Equal(got, []string{"queued", "queued", "duplicate", "queued"}) {
		t.Fatalf("push statuses %v", got)
	}
	woken := <-parked
	if got := payloads(woken.Messages); !slices.Equal(got, []string{`{"n":1}`, `{"n":2}`}) || woken.Partition != "new-one" {
		t.Fatalf("the parked sink pop got %v from %q", got, woken.Partition)
	}
	for _, msg := range woken.Messages {
		if str(msg.ProducerSub) != "stream-runner" {
			t.Fatalf("sink message producerSub %s, want the token's sub", str(msg.ProducerSub))
		}
	}
	checkSealed(t, "sealed sink", storedRows(t, c, "sealed.out"), 1, "the-marker")

	// A retried cycle whose first attempt committed: the ack is refused (the lease is gone), so
	// nothing is pushed twice.
	again, err := q.cycle(map[string]any{"partition_id": *p.PartitionID, "consumer_group": q.group,
		"push_items": []map[string]any{{"queue": "plain.out", "payload": 3}},
		"ack":        map[string]any{"transactionId": m.TransactionID, "leaseId": m.LeaseID}})
	must(t, err)
	if again.Success {
		t.Fatalf("a replayed cycle committed: %+v", again)
	}
	if rows := storedRows(t, c, "plain.out"); len(rows) != 2 {
		t.Fatalf("plain.out holds %d messages, want 2", len(rows))
	}
}

// A cycle's sink push through broker A wakes a pop parked on the sink at broker B: B re-checks
// its parked pops only after a minute, so only the mesh's wake-up can deliver in time.
func TestStreamCycleWakesSinkPopsAcrossTheMesh(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	var lns [2]net.Listener
	var addrs []string
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		lns[i] = ln
		addrs = append(addrs, ln.Addr().String())
	}
	a := startMeshNode(t, "streams-a", db, lns[0], addrs, nil)
	b := startMeshNode(t, "streams-b", db, lns[1], addrs, map[string]string{
		"POP_WAIT_INITIAL_INTERVAL_MS": "60000", "POP_WAIT_MAX_INTERVAL_MS": "60000",
	})
	meshReady(t, a, 1)
	meshReady(t, b, 1)
	apiA := streamAPIAt(a.base)
	must(t, apiA.call("POST", "/api/v1/configure", map[string]any{"queue": "wake.sink"}, 200, nil))
	must(t, apiA.call("POST", "/api/v1/push", map[string]any{"items": []item{{"queue": "wake.src", "payload": 1}}}, 200, nil))
	q := registerQuery(t, apiA, "wake.q", "wake.src", "wake.sink", "h")
	p, err := q.popSource(1, 0, "")
	must(t, err)

	done := asyncPop(b, "/api/v1/pop/queue/wake.sink?wait=true&batch=10&timeout=30000")
	testkit.WaitFor(t, 10*time.Second, "the sink pop to park on B", func() bool { return parkedOn(t, b, "wake.sink") == 1 })
	m := p.Messages[0]
	ans, err := q.cycle(map[string]any{"partition_id": *p.PartitionID, "consumer_group": q.group,
		"push_items": []map[string]any{{"queue": "wake.sink", "payload": map[string]any{"via": "cycle"}}},
		"ack":        map[string]any{"transactionId": m.TransactionID, "leaseId": m.LeaseID}})
	must(t, err)
	if !ans.Success {
		t.Fatalf("cycle: %+v", ans)
	}
	o := <-done
	if o.err != nil || !slices.Equal(payloads(o.p.Messages), []string{`{"via":"cycle"}`}) {
		t.Fatalf("the pop parked on B: %v %v", payloads(o.p.Messages), o.err)
	}
}

// A tenant reads and writes only its own stream state; a write-only token cannot read state;
// deleting a query needs admin.
func TestStreamTenancyAndAccessLevels(t *testing.T) {
	t.Parallel()
	const secret = "streams-access-secret-0123456789abcdef"
	c := startBroker(t, tenancyOn, withJWT(func(j *auth.Config) { j.Secret = secret }))
	tok := func(role string) string {
		return "Bearer " + testkit.SignJWT(t, jwt.SigningMethodHS256, []byte(secret), "", jwt.MapClaims{"sub": role, "role": role, "exp": time.Now().Add(time.Hour).Unix()})
	}
	acme := newStreamAPI(c, "Authorization", tok("read-write"), "x-queen-tenant", "acme")
	globex := newStreamAPI(c, "Authorization", tok("read-write"), "x-queen-tenant", "globex")
	acmeClient := c.WithHeader("Authorization", tok("read-write")).WithHeader("x-queen-tenant", "acme")
	push(t, acmeClient, item{"queue": "orders", "payload": 1})
	q := registerQuery(t, acme, "orders.sum", "orders", "", "h")
	p := pop(t, acmeClient, "/api/v1/pop/queue/orders", "consumerGroup", q.group)
	ans, err := q.cycle(map[string]any{"partition_id": *p.PartitionID, "state_ops": []map[string]any{{"type": "upsert", "key": "k", "value": 1}}})
	must(t, err)
	if !ans.Success {
		t.Fatalf("acme's cycle: %+v", ans)
	}

	// globex, with acme's query id and partition id: no rows, no write.
	foreign := &query{api: globex, id: q.id}
	if rows, err := foreign.state(*p.PartitionID, nil); err != nil || len(rows) != 0 {
		t.Fatalf("globex read acme's state: %v %v", rows, err)
	}
	w, err := foreign.cycle(map[string]any{"partition_id": *p.PartitionID, "state_ops": []map[string]any{{"type": "upsert", "key": "k", "value": 666}}})
	must(t, err)
	if w.Success || w.Error != "query_id not found" {
		t.Fatalf("globex wrote acme's state: %+v", w)
	}
	if rows, err := q.state(*p.PartitionID, nil); err != nil || len(rows) != 1 || string(rows[0].Value) != "1" {
		t.Fatalf("acme's state: %+v %v", rows, err)
	}
	// The same name is another query in globex's tenant, and globex cannot delete acme's.
	registerQuery(t, globex, "orders.sum", "orders", "", "other-hash")
	must(t, globex.call("DELETE", "/streams/v1/queries/orders.sum", nil, 403, nil))

	writeOnly := &query{api: newStreamAPI(c, "Authorization", tok("write-only"), "x-queen-tenant", "acme"), id: q.id}
	if _, err := writeOnly.state(*p.PartitionID, nil); err == nil || !strings.Contains(err.Error(), "status 403") {
		t.Fatalf("a write-only token read state: %v", err)
	}
	readOnly := &query{api: newStreamAPI(c, "Authorization", tok("read-only"), "x-queen-tenant", "acme"), id: q.id}
	if rows, err := readOnly.state(*p.PartitionID, nil); err != nil || len(rows) != 1 {
		t.Fatalf("a read-only token reading state: %v %v", rows, err)
	}
	if _, err := readOnly.cycle(map[string]any{"partition_id": *p.PartitionID}); err == nil || !strings.Contains(err.Error(), "status 403") {
		t.Fatalf("a read-only token committed a cycle: %v", err)
	}
	adminAcme := newStreamAPI(c, "Authorization", tok("admin"), "x-queen-tenant", "acme")
	must(t, adminAcme.call("DELETE", "/streams/v1/queries/orders.sum", nil, 200, nil))
	var still registered
	must(t, globex.call("POST", "/streams/v1/queries", map[string]any{"name": "orders.sum", "source_queue": "orders", "config_hash": "other-hash"}, 200, &still))
	if still.Fresh {
		t.Fatal("deleting acme's orders.sum deleted globex's")
	}
}

// Bad input on each route answers 400 naming the field, in the streams' success:false shape.
func TestStreamRoutesRefuseBadInput(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	id := uuid.NewString()
	for _, tc := range []struct {
		path, body, want string
	}{
		{"/streams/v1/queries", `[]`, "request body must be a JSON object"},
		{"/streams/v1/queries", `{"source_queue":"s","config_hash":"h"}`, "name is required"},
		{"/streams/v1/queries", `{"name":"n","config_hash":"h"}`, "source_queue is required"},
		{"/streams/v1/queries", `{"name":"n","source_queue":"s"}`, "config_hash is required"},
		{"/streams/v1/queries", `{"name":"n","source_queue":"s","config_hash":"h","reset":"yes"}`, "reset must be a boolean"},
		{"/streams/v1/queries", `{"name":"n","source_queue":"s","sink_queue":7,"config_hash":"h"}`, "sink_queue must be a string"},
		{"/streams/v1/queries", `{"name":"` + strings.Repeat("n", 256) + `","source_queue":"s","config_hash":"h"}`, "name must be at most 255 characters"},
		{"/streams/v1/queries", `{"name":"a\u001fb","source_queue":"s","config_hash":"h"}`, `name must not contain the character \u001f`},
		{"/streams/v1/cycle", `{"partition_id":"` + id + `"}`, "query_id is required"},
		{"/streams/v1/cycle", `{"query_id":"nope","partition_id":"` + id + `"}`, "query_id must be a UUID"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":5}`, "partition_id must be a string"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","state_ops":{}}`, "state_ops must be an array"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","state_ops":[{"type":"merge","key":"k"}]}`, "state_ops[0].type must be upsert or delete"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","state_ops":[{"type":"upsert","key":"k"}]}`, "state_ops[0].value is required for an upsert"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","state_ops":[{"type":"delete"}]}`, "state_ops[0].key is required"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","state_ops":[{"type":"delete","key":"` + strings.Repeat("k", 1025) + `"}]}`, "state_ops[0].key must be at most 1024 bytes"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","state_ops":[{"type":"upsert","key":"k","value":{"a":"\u0000"}}]}`, `state_ops[0].value must not contain the character \u0000`},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","push_items":[{"payload":1}]}`, "push_items[0].queue is required"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","push_items":[{"queue":"q","traceId":"x"}]}`, "push_items[0].traceId must be a UUID"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","ack":[]}`, "ack must be an object"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","ack":{}}`, "ack.transactionId is required"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","ack":{"transactionId":"t","status":"retry"}}`, "ack.status must be one of completed, success, failed, dlq"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","ack":{"transactionId":"t","count":-1}}`, "ack.count must be a non-negative integer"},
		{"/streams/v1/cycle", `{"query_id":"` + id + `","partition_id":"` + id + `","release_lease":"no"}`, "release_lease must be a boolean"},
		{"/streams/v1/state/get", `{"query_id":"` + id + `"}`, "partition_id is required"},
		{"/streams/v1/state/get", `{"query_id":"` + id + `","partition_id":"` + id + `","keys":"k"}`, "keys must be an array"},
		{"/streams/v1/state/get", `{"query_id":"` + id + `","partition_id":"` + id + `","keys":[1]}`, "keys[0] must be a string"},
		{"/streams/v1/state/get", `{"query_id":"` + id + `","partition_id":"` + id + `","key_prefix":1}`, "key_prefix must be a string"},
		{"/streams/v1/state/get", `{"query_id":"` + id + `","partition_id":"` + id + `","ripe_at_or_before":"soon"}`, "ripe_at_or_before must be a number (milliseconds since the epoch)"},
	} {
		status, raw := c.Do("POST", tc.path, tc.body)
		var out streamErrorAnswer
		if status != 400 || json.Unmarshal(raw, &out) != nil || out.Success || out.Error != tc.want {
			t.Errorf("POST %s %s: %d %s, want 400 %q", tc.path, tc.body, status, raw, tc.want)
		}
	}
	// Well-formed but unknown: a cycle of a query that does not exist is refused, not a 500.
	var ans cycleAnswer
	c.JSON("POST", "/streams/v1/cycle", map[string]any{"query_id": id, "partition_id": id}, 200, &ans)
	if ans.Success || ans.Error != "query_id not found" {
		t.Fatalf("unknown query: %+v", ans)
	}
	var rows struct {
		Success bool            `json:"success"`
		Rows    json.RawMessage `json:"rows"`
	}
	c.JSON("POST", "/streams/v1/state/get", map[string]any{"query_id": id, "partition_id": id}, 200, &rows)
	if !rows.Success || string(rows.Rows) != "[]" {
		t.Fatalf("state of an unknown query: %+v", rows)
	}
}

type streamErrorAnswer struct {
	Success bool   `json:"success"`
	Error   string `json:"error"`
}

// The SDKs' idle-flush timer reads a partition's state while their main loop may be committing
// a cycle of the same partition. A state read waits for that cycle and returns what it wrote;
// it never returns state the cycle is about to change. The test holds the row of the key the
// cycle upserts, so the cycle stays in flight (it holds the partition's cycle lock) until the
// test lets it go.
func TestStreamStateReadWaitsForACycleInFlight(t *testing.T) {
	t.Parallel()
	cs := pgtest.NewDatabase(t)
	c := servertest.Start(t, cs)
	pushEvents(t, c, "flushed", 1, 1)
	q := registerQuery(t, newStreamAPI(c), "flushed.per_window", "flushed", "flushed.windows", "sha256:v1")
	p, err := q.popSource(1, 0, "")
	must(t, err)
	if len(p.Messages) != 1 {
		t.Fatalf("pop of the source: %+v", p)
	}
	pid, m := *p.PartitionID, p.Messages[0]
	upsert := func(v int) []map[string]any {
		return []map[string]any{{"type": "upsert", "key": "window", "value": map[string]any{"count": v}}}
	}
	ans, err := q.cycle(map[string]any{"partition_id": pid, "consumer_group": q.group, "state_ops": upsert(1)})
	must(t, err)
	if !ans.Success {
		t.Fatalf("first cycle: %+v", ans)
	}

	ctx := context.Background()
	connect := func() *pgx.Conn {
		conn, err := pgx.Connect(ctx, cs)
		must(t, err)
		t.Cleanup(func() { conn.Close(ctx) })
		return conn
	}
	holder, err := connect().Begin(ctx)
	must(t, err)
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, `SELECT 1 FROM queen_streams.state WHERE key = 'window' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	watch := connect()
	waiting := func(event string) func() bool {
		return func() bool {
			var n int
			err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = $1`, event).Scan(&n)
			return err == nil && n > 0
		}
	}

	committed := make(chan cycleAnswer, 1)
	go func() {
		ans, err := q.cycle(map[string]any{"partition_id": pid, "consumer_group": q.group, "state_ops": upsert(2),
			"ack": map[string]any{"transactionId": m.TransactionID, "leaseId": m.LeaseID, "status": "completed"}})
		if err != nil {
			ans.Error = err.Error()
		}
		committed <- ans
	}()
	waitFor(t, "the cycle waiting on the held state row", waiting("transactionid"))

	read := make(chan []stateRow, 1)
	go func() {
		rows, err := q.state(pid, nil)
		if err != nil {
			rows = []stateRow{{Key: "error", Value: json.RawMessage(fmt.Sprintf("%q", err))}}
		}
		read <- rows
	}()
	waitFor(t, "the state read waiting on the cycle in flight", func() bool {
		select {
		case rows := <-read:
			t.Fatalf("state/get answered while a cycle of the partition was in flight: %+v", rows)
		default:
		}
		return waiting("advisory")()
	})
	must(t, holder.Rollback(ctx))
	if ans := <-committed; !ans.Success {
		t.Fatalf("cycle in flight: %+v", ans)
	}
	rows := <-read
	var w struct{ Count int }
	if len(rows) != 1 || rows[0].Key != "window" || json.Unmarshal(rows[0].Value, &w) != nil || w.Count != 2 {
		t.Fatalf("state read after the cycle: %s, want the window the cycle wrote", fmtJSON(rows))
	}
}

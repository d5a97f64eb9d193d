package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"queen/config"
	"queen/pg/localpg"
	"queen/server"
	"queen/server/servertest"
	"queen/testkit"
)

// rawDo sends one request without a testing.T, so goroutines can use it and see errors.
func rawDo(hc *http.Client, base, method, path string, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, r)
	if err != nil {
		return 0, nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// pause waits d unless stop closes first; it reports whether to go on. It only spaces out
// retries against a database that is down, and paces the producers.
func pause(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}

type outageKey struct{ w, n int }

type outageDelivery struct {
	outageKey
	partition string
	at        time.Time
}

// outageScenario says how PostgreSQL goes away and comes back, and which brokers carry the load.
type outageScenario struct {
	name    string
	brokers []outageBroker
	down    func(t *testing.T) // take PostgreSQL away
	up      func(t *testing.T) // bring it back
	// hold is how long PostgreSQL stays away under load once every broker has spooled.
	hold time.Duration
	// clientTimeout is how long a client waits for an answer; a push that waits longer counts
	// as not answered.
	clientTimeout time.Duration
	reportsDB     bool // status/buffers must say dbHealthy false while down
	// brief: the outage may end before a push waits out FILE_BUFFER_DB_WAIT_MS (a planned
	// switchover), so nothing need be spooled.
	brief bool
	queue string // "outage" when ""
}

// outageBroker is one broker under the outage load.
type outageBroker struct {
	doer
	base   string
	broker *server.Broker
}

// outageCluster is the test's own PostgreSQL.
type outageCluster struct {
	mu      sync.Mutex
	dir     string
	log     *slog.Logger
	cluster *localpg.Cluster
}

// clusterDir makes the directory of a PostgreSQL of the test's own, removed when the test ends:
// under /tmp and enterable, since when we are root the cluster runs as another user (t.TempDir
// may lie below a directory that user cannot enter).
func clusterDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// newOutageCluster starts a PostgreSQL of the test's own, to stop and start under a broker.
// Call it before starting the broker: its cleanup then runs after the broker's shutdown.
func newOutageCluster(t *testing.T) *outageCluster {
	t.Helper()
	pg := &outageCluster{dir: clusterDir(t, "queen-outage-"), log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	t.Cleanup(func() {
		pg.mu.Lock()
		defer pg.mu.Unlock()
		if pg.cluster != nil {
			if err := pg.cluster.Stop(); err != nil {
				t.Errorf("stop PostgreSQL: %v", err)
			}
		}
	})
	pg.start(t)
	return pg
}

func (o *outageCluster) stop(t *testing.T) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.cluster.Stop(); err != nil {
		t.Fatalf("stop PostgreSQL: %v", err)
	}
}

func (o *outageCluster) start(t *testing.T) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c, err := localpg.Start(context.Background(), localpg.Options{DataDir: o.dir, Logger: o.log})
	if err != nil {
		t.Fatalf("cannot start PostgreSQL: %v", err)
	}
	o.cluster = c
}

// TestOutagePostgresDownUnderLoad stops PostgreSQL for 10 s under a steady push and consume
// load, then starts it again. While it is down every push is answered from the disk spool
// (buffered) within the bounded wait; afterwards every push answered queued or buffered is
// delivered exactly once to each consumer group (queue mode and a named group), in order per
// partition and per producer, and PostgreSQL holds each message once.
func TestOutagePostgresDownUnderLoad(t *testing.T) {
	skipLong(t)
	pg := newOutageCluster(t)
	runOutage(t, outageScenario{
		name:          "stopped",
		brokers:       []outageBroker{startOutageBroker(t, pg)},
		down:          pg.stop,
		up:            pg.start,
		hold:          10 * time.Second,
		clientTimeout: 5 * time.Second,
		reportsDB:     true,
	})
}

// TestOutagePostgresFrozenUnderLoad is the same with a PostgreSQL that hangs for 10 s instead
// of refusing connections (every server process stopped with SIGSTOP): pushes must still be
// answered, which is the case the bounded wait (FILE_BUFFER_DB_WAIT_MS) exists for: the test's
// client gives up after half the freeze, as a client with a timeout would, so a push that waits
// for PostgreSQL to thaw counts as not answered. The log says how long after the thaw the last message was delivered:
// a pop answered 503 during the hang may still commit its lease when PostgreSQL resumes, and
// its partition then waits out the lease.
func TestOutagePostgresFrozenUnderLoad(t *testing.T) {
	skipLong(t)
	pg := newOutageCluster(t)
	b := startOutageBroker(t, pg)
	t.Cleanup(pg.cluster.Thaw) // before the broker's shutdown, which waits for its database work
	runOutage(t, outageScenario{
		name:    "frozen",
		brokers: []outageBroker{b},
		down: func(t *testing.T) {
			if err := pg.cluster.Freeze(); err != nil {
				t.Fatal(err)
			}
		},
		up:            func(*testing.T) { pg.cluster.Thaw() },
		hold:          10 * time.Second,
		clientTimeout: 5 * time.Second,
	})
}

func skipLong(t *testing.T) {
	if testing.Short() {
		t.Skip("the outage tests run for about half a minute each")
	}
}

// outageWait is FILE_BUFFER_DB_WAIT_MS of the outage brokers: how long a push waits on
// PostgreSQL before it is spooled.
const outageWait = 2 * time.Second

// startOutageBroker starts a broker on the outage cluster, draining its spool every 50 ms.
func startOutageBroker(t *testing.T, pg *outageCluster) outageBroker {
	c := servertest.Start(t, pg.cluster.ConnString("postgres"), func(c *config.Config) {
		c.ServerID, c.SpoolAfter, c.SpoolFlush = "outage-broker", outageWait, 50*time.Millisecond
	})
	return outageBroker{doer: c, base: c.Base, broker: c.Broker}
}

// outageResult is when PostgreSQL went away, when it was back, and the answer to the first
// push queued in PostgreSQL that was sent after it went away.
type outageResult struct {
	downAt, upAt, firstQueuedAt time.Time
	// refused counts the pops and acks answered 503 (or not answered in time); the first
	// and the last of them bound the time requests were refused.
	refused                   int
	firstRefused, lastRefused time.Time
}

// refusedFor is how long requests were refused, 0 when none was.
func (r outageResult) refusedFor() time.Duration { return r.lastRefused.Sub(r.firstRefused) }

// runOutage puts the brokers under a steady push and consume load (producers and consumers
// spread over the brokers), takes PostgreSQL away and brings it back, and checks that every
// push answered queued or buffered is delivered exactly once to each consumer group, in order
// per partition and per producer, that PostgreSQL holds each message once, that every ack
// holds, and that the pops and acks refused meanwhile were told 503, not 500.
func runOutage(t *testing.T, sc outageScenario) outageResult {
	const (
		producers = 3
		perPush   = 2
	)
	queue := sc.queue
	if queue == "" {
		queue = "outage"
	}
	parts := []string{"p0", "p1", "p2"}
	groups := []string{"", "g1"}
	brokerOf := func(i int) outageBroker { return sc.brokers[i%len(sc.brokers)] }

	ctx := context.Background()
	// A pop that PostgreSQL commits after the broker gave up on it (answered 503) leaves its
	// messages leased, so they are delivered only once the lease expires: a short lease bounds
	// that wait. Acks are retried through the outage well within it.
	const leaseTime = 30 * time.Second
	call[map[string]any](t, sc.brokers[0], "POST", "/api/v1/configure", map[string]any{"queue": queue, "options": map[string]any{"leaseTime": int(leaseTime.Seconds())}}, 200)

	hc := &http.Client{Timeout: sc.clientTimeout}
	const (
		phaseBefore = iota
		phaseDown
		phaseBack
	)
	var phase atomic.Int32
	var goneAt atomic.Int64 // UnixNano when sc.down returned; 0 before

	// What the producers were told.
	var (
		pmu           sync.Mutex
		accepted      = map[outageKey]string{} // key -> "queued" or "buffered"
		unanswered    = map[outageKey]bool{}   // pushes that got no queued/buffered answer
		count         = map[string]int{}       // item statuses per phase, e.g. "down/buffered"
		maxLatency    [3]time.Duration         // per phase
		pushFailures  []string
		firstQueuedAt time.Time // the answer to the first push sent after PostgreSQL went away and queued
	)
	stopProducers := make(chan struct{})
	var producersWG sync.WaitGroup
	for w := range producers {
		producersWG.Add(1)
		go func() {
			defer producersWG.Done()
			n := 0
			for round := 0; pause(stopProducers, 20*time.Millisecond); round++ {
				p := parts[(round+w)%len(parts)]
				items := make([]item, perPush)
				keys := make([]outageKey, perPush)
				for i := range items {
					keys[i] = outageKey{w, n}
					items[i] = item{"queue": queue, "partition": p, "transactionId": fmt.Sprintf("w%d-n%d", w, n), "payload": map[string]any{"w": w, "n": n}}
					n++
				}
				ph := phase.Load()
				t0 := time.Now()
				status, raw, err := rawDo(hc, brokerOf(w).base, "POST", "/api/v1/push", map[string]any{"items": items})
				lat := time.Since(t0)
				gone := goneAt.Load()
				var res []pushResult
				if err == nil {
					err = json.Unmarshal(raw, &res)
				}
				pmu.Lock()
				phName := [...]string{"before", "down", "back"}[ph]
				maxLatency[ph] = max(maxLatency[ph], lat)
				ok := err == nil && len(res) == len(items) && (status == 200 || status == 201)
				for i, k := range keys {
					if ok && (res[i].Status == "queued" || res[i].Status == "buffered") {
						accepted[k] = res[i].Status
						count[phName+"/"+res[i].Status]++
						if at := t0.Add(lat); res[i].Status == "queued" && gone != 0 && t0.UnixNano() > gone &&
							(firstQueuedAt.IsZero() || at.Before(firstQueuedAt)) {
							firstQueuedAt = at
						}
						if status == 200 && res[i].Status == "buffered" {
							pushFailures = append(pushFailures, fmt.Sprintf("HTTP 200 with a buffered item: %s", raw))
						}
					} else {
						unanswered[k] = true
						count[phName+"/failed"]++
					}
				}
				if !ok || len(res) != len(items) {
					pushFailures = append(pushFailures, fmt.Sprintf("producer %d (phase %s): status %d err %v body %.300s", w, phName, status, err, raw))
				} else {
					for _, r := range res {
						if r.Status != "queued" && r.Status != "buffered" {
							pushFailures = append(pushFailures, fmt.Sprintf("producer %d (phase %s): item %+v", w, phName, r))
						}
					}
				}
				pmu.Unlock()
			}
		}()
	}

	// What the consumers got, per group, in delivery order.
	var (
		cmu        sync.Mutex
		delivered  = map[string][]outageDelivery{}
		popErrors  = map[string]int{}
		ackErrors  = map[string]int{}
		ackRefused []string
		refusals   outageResult // refused, firstRefused and lastRefused
	)
	refusedAt := func(at time.Time) { // under cmu
		refusals.refused++
		if refusals.firstRefused.IsZero() {
			refusals.firstRefused = at
		}
		refusals.lastRefused = at
	}
	stopConsumers := make(chan struct{})
	var consumersWG sync.WaitGroup
	for _, g := range groups {
		for i := range 2 {
			consumersWG.Add(1)
			base := brokerOf(i).base
			go func() {
				defer consumersWG.Done()
				for {
					select {
					case <-stopConsumers:
						return
					default:
					}
					status, raw, err := rawDo(hc, base, "GET", "/api/v1/pop/queue/"+queue+"?wait=true&timeout=1000&batch=50&consumerGroup="+g, nil)
					var p popResponse
					if err == nil && status == 200 {
						err = json.Unmarshal(raw, &p)
					}
					if err != nil || status != 200 {
						cmu.Lock()
						popErrors[fmt.Sprintf("%d", status)]++
						refusedAt(time.Now())
						cmu.Unlock()
						if !pause(stopConsumers, 50*time.Millisecond) {
							return
						}
						continue
					}
					if len(p.Messages) == 0 {
						continue
					}
					// Recorded before the ack: the partition's next batch is only delivered
					// after it, so the record order is the delivery order.
					cmu.Lock()
					for _, m := range p.Messages {
						var d struct{ W, N int }
						if err := json.Unmarshal(m.Data, &d); err != nil {
							t.Errorf("undecodable payload %s", m.Data)
						}
						delivered[g] = append(delivered[g], outageDelivery{outageKey{d.W, d.N}, m.Partition, time.Now()})
					}
					cmu.Unlock()
					acks := make([]map[string]any, len(p.Messages))
					for i, m := range p.Messages {
						acks[i] = map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": "completed"}
					}
					for {
						status, raw, err := rawDo(hc, base, "POST", "/api/v1/ack/batch", map[string]any{"consumerGroup": g, "acknowledgments": acks})
						if err == nil && status == 200 {
							var res []ackResult
							_ = json.Unmarshal(raw, &res)
							for _, r := range res {
								if !r.Success {
									cmu.Lock()
									ackRefused = append(ackRefused, fmt.Sprintf("group %q: %s", g, fmtJSON(r)))
									cmu.Unlock()
								}
							}
							break
						}
						cmu.Lock()
						ackErrors[fmt.Sprintf("%d", status)]++
						refusedAt(time.Now())
						cmu.Unlock()
						if !pause(stopConsumers, 50*time.Millisecond) {
							return
						}
					}
				}
			}()
		}
	}
	stopAll := func() {
		select {
		case <-stopProducers:
		default:
			close(stopProducers)
		}
		producersWG.Wait()
		select {
		case <-stopConsumers:
		default:
			close(stopConsumers)
		}
		consumersWG.Wait()
	}
	defer stopAll()

	deliveredCount := func(g string) int {
		cmu.Lock()
		defer cmu.Unlock()
		return len(delivered[g])
	}
	statusCount := func(k string) int {
		pmu.Lock()
		defer pmu.Unlock()
		return count[k]
	}

	// Steady state first: pushes queued, both groups consuming.
	testkit.WaitFor(t, time.Minute, "the load to reach a steady state", func() bool {
		return statusCount("before/queued") >= 100 && deliveredCount("") >= 50 && deliveredCount("g1") >= 50
	})

	// PostgreSQL goes away.
	phase.Store(phaseDown)
	downAt := time.Now()
	sc.down(t)
	goneAt.Store(time.Now().UnixNano())
	t.Logf("PostgreSQL %s (that took %v)", sc.name, time.Since(downAt))
	if !sc.brief {
		testkit.WaitFor(t, time.Minute, "pushes to be buffered while PostgreSQL is down", func() bool { return statusCount("down/buffered") > 0 })
		for _, b := range sc.brokers {
			testkit.WaitFor(t, time.Minute, "status/buffers of every broker to report records pending", func() bool {
				st := buffers(t, b)
				return st.Pending > 0 && (!sc.reportsDB || !st.DBHealthy)
			})
		}
	}
	// The outage lasts its full hold under load.
	pause(nil, time.Until(downAt.Add(sc.hold)))
	t.Logf("after %v down: status/buffers %+v", time.Since(downAt).Round(time.Millisecond), buffers(t, sc.brokers[0]))

	upAt := time.Now()
	sc.up(t)
	phase.Store(phaseBack)
	t.Logf("PostgreSQL back after %v down (that took %v)", upAt.Sub(downAt).Round(time.Millisecond), time.Since(upAt))

	// A little more load: until the spools have drained and pushes reach PostgreSQL again.
	testkit.WaitFor(t, time.Minute, "pushes to be queued in PostgreSQL again", func() bool { return statusCount("back/queued") >= 30 })
	for _, b := range sc.brokers {
		testkit.WaitFor(t, time.Minute, "the spool of every broker to drain", func() bool {
			st := buffers(t, b)
			return st.DBHealthy && st.Pending == 0
		})
	}
	close(stopProducers)
	producersWG.Wait()

	pmu.Lock()
	want := maps2slice(accepted)
	pmu.Unlock()
	allDelivered := func(g string) bool {
		cmu.Lock()
		defer cmu.Unlock()
		got := map[outageKey]bool{}
		for _, d := range delivered[g] {
			got[d.outageKey] = true
		}
		for _, k := range want {
			if !got[k] {
				return false
			}
		}
		return true
	}
	testkit.WaitFor(t, 3*time.Minute, "every accepted push to be delivered to every group", func() bool {
		return allDelivered("") && allDelivered("g1")
	})
	close(stopConsumers)
	consumersWG.Wait()
	// How long after PostgreSQL came back the last accepted message reached each group; those
	// that took longer than half a lease waited for a lease taken by a pop that failed.
	for _, g := range groups {
		first := map[outageKey]time.Time{}
		for _, d := range delivered[g] {
			if _, ok := first[d.outageKey]; !ok {
				first[d.outageKey] = d.at
			}
		}
		var lastAt time.Time
		late := 0
		for _, k := range want {
			lastAt = later(lastAt, first[k])
			if first[k].Sub(upAt) > leaseTime/2 {
				late++
			}
		}
		t.Logf("group %q: last accepted message delivered %v after PostgreSQL came back; %d delivered more than %v after it",
			g, lastAt.Sub(upAt).Round(time.Millisecond), late, leaseTime/2)
	}
	// Anything left (a message delivered twice would show up here only after a lease expiry;
	// this catches messages stored without an answer, or stored twice).
	for _, g := range groups {
		for _, m := range consumeAll(t, sc.brokers[0], queue, g) {
			var d struct{ W, N int }
			_ = json.Unmarshal(m.Data, &d)
			delivered[g] = append(delivered[g], outageDelivery{outageKey{d.W, d.N}, m.Partition, time.Now()})
		}
	}

	t.Logf("pushes per phase/status (items): %v", count)
	t.Logf("max push latency: before %v, PostgreSQL down %v, after restart %v (bounded wait %v)",
		maxLatency[phaseBefore], maxLatency[phaseDown], maxLatency[phaseBack], outageWait)
	t.Logf("accepted %d items (%d unanswered); delivered: queue mode %d, g1 %d; pop errors by status %v, ack errors by status %v",
		len(accepted), len(unanswered), len(delivered[""]), len(delivered["g1"]), popErrors, ackErrors)
	for _, s := range pushFailures {
		t.Errorf("push not answered queued or buffered: %s", s)
	}
	for _, s := range ackRefused {
		t.Logf("ack refused (a redelivery may follow): %s", s)
	}
	if count["down/buffered"] == 0 && !sc.brief {
		t.Errorf("no push was buffered while PostgreSQL was down")
	}
	t.Logf("pops and acks refused: %d, for %v", refusals.refused, refusals.refusedFor().Round(time.Millisecond))
	// A pop or an ack PostgreSQL could not take is told to come back (503), never 500; 0 is a
	// client that gave up waiting.
	for what, errs := range map[string]map[string]int{"pops": popErrors, "acks": ackErrors} {
		for status, n := range errs {
			if status != "503" && status != "0" {
				t.Errorf("%d %s answered %s while PostgreSQL was away, want 503", n, what, status)
			}
		}
	}
	t.Logf("first push queued in PostgreSQL among those sent after it went away: answered %v after it went, %v after it was back",
		firstQueuedAt.Sub(downAt).Round(time.Millisecond), firstQueuedAt.Sub(upAt).Round(time.Millisecond))

	// PostgreSQL's order per partition, to compare each group's delivery order with.
	pool := sc.brokers[0].broker.Store().Pool()
	rows, err := pool.Query(ctx, `SELECT p.name, m.payload FROM queen.messages m
		JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = $1 ORDER BY p.name, m.seq`, queue)
	if err != nil {
		t.Fatal(err)
	}
	commit := map[string][]outageKey{}
	stored := map[outageKey]int{}
	for rows.Next() {
		var part string
		var payload []byte
		if err := rows.Scan(&part, &payload); err != nil {
			t.Fatal(err)
		}
		var d struct{ W, N int }
		_ = json.Unmarshal(payload, &d)
		commit[part] = append(commit[part], outageKey{d.W, d.N})
		stored[outageKey{d.W, d.N}]++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for k, n := range stored {
		if n != 1 {
			t.Errorf("message w%d-n%d stored %d times", k.w, k.n, n)
		}
		if accepted[k] == "" && !unanswered[k] {
			t.Errorf("message w%d-n%d stored but never pushed", k.w, k.n)
		}
	}
	for k := range accepted {
		if stored[k] != 1 {
			t.Errorf("accepted message w%d-n%d (%s) stored %d times", k.w, k.n, accepted[k], stored[k])
		}
	}

	// Every ack holds: each group's cursor is at the head of each partition. An ack lost with
	// PostgreSQL would leave its messages leased, which the last consumeAll cannot take.
	rows, err = pool.Query(ctx, `SELECT pc.consumer_group, p.name, pc.cursor_seq, p.last_seq
		FROM queen.partition_consumers pc JOIN queen.partitions p ON p.id = pc.partition_id
		JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1`, queue)
	if err != nil {
		t.Fatal(err)
	}
	cursors := 0
	for rows.Next() {
		var group, part string
		var cursor, head int64
		if err := rows.Scan(&group, &part, &cursor, &head); err != nil {
			t.Fatal(err)
		}
		cursors++
		if cursor != head {
			t.Errorf("group %q partition %s: acknowledged up to %d of %d", group, part, cursor, head)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if cursors != len(groups)*len(parts) {
		t.Errorf("%d consumer cursors, want one per group and partition (%d)", cursors, len(groups)*len(parts))
	}

	for _, g := range groups {
		seen := map[outageKey]int{}
		byPart := map[string][]outageKey{}
		last := map[[2]any]int{}
		for _, d := range delivered[g] {
			seen[d.outageKey]++
			byPart[d.partition] = append(byPart[d.partition], d.outageKey)
			key := [2]any{d.partition, d.w}
			if prev, ok := last[key]; ok && d.n <= prev {
				t.Errorf("group %q: producer %d's message %d delivered after %d in %s", g, d.w, d.n, prev, d.partition)
			}
			last[key] = d.n
		}
		dup := 0
		for k, n := range seen {
			if n > 1 {
				dup++
				if dup <= 10 {
					t.Errorf("group %q: message w%d-n%d (%s) delivered %d times", g, k.w, k.n, accepted[k], n)
				}
			}
		}
		if dup > 10 {
			t.Errorf("group %q: %d messages delivered more than once", g, dup)
		}
		missing := 0
		for k := range accepted {
			if seen[k] == 0 {
				missing++
			}
		}
		if missing > 0 {
			t.Errorf("group %q: %d accepted messages never delivered", g, missing)
		}
		for part, keys := range commit {
			if !slices.Equal(byPart[part], keys) {
				t.Errorf("group %q partition %s: delivery order differs from PostgreSQL's order (%d delivered, %d stored)", g, part, len(byPart[part]), len(keys))
			}
		}
	}
	refusals.downAt, refusals.upAt, refusals.firstQueuedAt = downAt, upAt, firstQueuedAt
	return refusals
}

func maps2slice(m map[outageKey]string) []outageKey {
	out := make([]outageKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].w < out[j].w || out[i].w == out[j].w && out[i].n < out[j].n })
	return out
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/xml"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen/config"
	"queen/pg/pgtest"
	"queen/server"
	"queen/server/servertest"

	"queen/testkit"
)

// The smoke runs every scenario for a second or two with small parameters against an
// in-process broker and asserts that its verification passed and messages flowed. It never
// looks at a rate or a latency: CI machines vary too much for thresholds to mean anything.

func TestMain(m *testing.M) { pgtest.Main(m) }

// target starts a broker on a fresh database; the database also serves the ceiling scenario.
func target(t *testing.T) *Target {
	t.Helper()
	db := pgtest.NewDatabase(t)
	c := servertest.Start(t, db)
	tg := &Target{URL: c.Base, PGConn: db}
	if err := tg.probe(); err != nil {
		t.Fatal(err)
	}
	if !tg.Native {
		t.Fatal("the in-process broker was not recognised as this project's broker by /health")
	}
	return tg
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// runArgs runs the bench as the command line args would, failing t on an error.
func runArgs(t *testing.T, args ...string) *Report {
	t.Helper()
	o, err := parseArgs(args)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := execute(ctx(t), o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func requireVerified(t *testing.T, r *Result, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if !r.Verified {
		t.Fatalf("%s: verification failed:\n%s", r.Label, strings.Join(r.Failures, "\n"))
	}
	if !r.latencyOnly() && r.Messages == 0 {
		t.Fatalf("%s: no message measured: %+v", r.Label, r)
	}
	t.Logf("%s: %.0f msg/s, p50 %.1f ms, notes %q", r.Label, r.MsgPerSec, r.Latency.P50, r.Notes)
}

// Warmup 0: a warmup would consume the small pre-filled queues before the window opens.
const smoke = 1500 * time.Millisecond

func TestCeilingSmoke(t *testing.T) {
	r, err := RunCeiling(ctx(t), target(t), CeilingConfig{Batch: 20, Size: 128, Conns: 2, Partitions: 3, Duration: smoke})
	requireVerified(t, r, err)
}

func TestPushSmoke(t *testing.T) {
	r, err := RunPush(ctx(t), target(t), PushConfig{Batch: 10, Size: 128, Partitions: 3, Conns: 3, Duration: smoke})
	requireVerified(t, r, err)
}

func TestConsumeSmoke(t *testing.T) {
	r, err := RunConsume(ctx(t), target(t), ConsumeConfig{Messages: 3000, Consumers: 3, Batch: 50, Size: 128, Partitions: 3, Duration: smoke})
	requireVerified(t, r, err)
}

func TestConsumeAutoAckSmoke(t *testing.T) {
	r, err := RunConsume(ctx(t), target(t), ConsumeConfig{Messages: 3000, Consumers: 3, Batch: 50, AutoAck: true, Size: 128, Partitions: 3, Duration: smoke})
	requireVerified(t, r, err)
}

func TestFanOutSmoke(t *testing.T) {
	r, err := RunConsume(ctx(t), target(t), ConsumeConfig{Messages: 2000, Consumers: 2, Groups: 2, Batch: 50, Size: 128, Partitions: 3, Duration: smoke})
	requireVerified(t, r, err)
}

func TestMixedSmoke(t *testing.T) {
	r, err := RunMixed(ctx(t), target(t), MixedConfig{Batch: 10, PopBatch: 10, Size: 128, Partitions: 3, Conns: 2, Consumers: 2, Duration: smoke})
	requireVerified(t, r, err)
	if r.ConsumedPerSec == nil || *r.ConsumedPerSec == 0 {
		t.Fatalf("mixed: nothing consumed during the window")
	}
}

// The cost cycle runs with the consumers keeping up (a paced rate they can hold).
func TestCostSmoke(t *testing.T) {
	r, err := RunCost(ctx(t), target(t), costConfig{Batch: 10, PopBatch: 100, Size: 128, Partitions: 20, Conns: 2, Consumers: 2,
		Rate: 1000, Duration: smoke})
	requireVerified(t, r, err)
	if r.Scenario != "cost" || r.LagGrowing == nil || *r.LagGrowing {
		t.Fatalf("cost: scenario %q, lag growing %v", r.Scenario, r.LagGrowing)
	}
}

// A message's cost is the CPU over the window divided by the messages of the window: half a
// core at 10k msg/s is 50 µs a message. A scenario measured by latency has none.
func TestCPUPerMessage(t *testing.T) {
	half, idle := 0.5, 0.0
	r := (&Result{Scenario: "push", MsgPerSec: 10000, BrokerCPU: &half, PGCPU: &idle}).done()
	if r.BrokerUsPerMsg == nil || *r.BrokerUsPerMsg != 50 || r.PGUsPerMsg == nil || *r.PGUsPerMsg != 0 {
		t.Errorf("µs/msg broker %v, PostgreSQL %v; want 50 and 0", r.BrokerUsPerMsg, r.PGUsPerMsg)
	}
	if r := (&Result{Scenario: "push", BrokerCPU: &half}).done(); r.BrokerUsPerMsg != nil {
		t.Errorf("no message, yet %v µs/msg", *r.BrokerUsPerMsg)
	}
	if r := (&Result{Scenario: "wake", MsgPerSec: 100, BrokerCPU: &half}).done(); r.BrokerUsPerMsg != nil {
		t.Errorf("wake is measured by latency, yet %v µs/msg", *r.BrokerUsPerMsg)
	}
}

func TestStreamsSmoke(t *testing.T) {
	r, err := RunStreams(ctx(t), target(t), StreamsConfig{Messages: 3000, Consumers: 3, Batch: 50, Size: 128, Partitions: 3, Duration: smoke})
	requireVerified(t, r, err)
	if r.CyclesPerSec == nil || *r.CyclesPerSec == 0 {
		t.Fatalf("streams: no cycle committed during the window")
	}
}

func TestWakeSmoke(t *testing.T) {
	r, err := RunWake(ctx(t), target(t), WakeConfig{Samples: 5, Size: 64})
	requireVerified(t, r, err)
	if r.Latency.N != 5 {
		t.Fatalf("wake: %d samples measured, want 5", r.Latency.N)
	}
}

// TestOutageSmoke stops the PostgreSQL of an in-process broker for most of five seconds of
// pushes: the run must see pushes buffered, the spool drain once PostgreSQL is back, and every
// message answered queued or buffered delivered exactly once, in order.
func TestOutageSmoke(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "queen-bench-outage-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// MkdirTemp makes it 0700; when we are root the server's own user has to enter it.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	pg, err := startPG(ctx(t), filepath.Join(dir, "pg"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the broker's shutdown, registered below
		if err := pg.stop(); err != nil {
			t.Error(err)
		}
	})
	c := servertest.Start(t, pg.conn, func(c *config.Config) { c.SpoolFlush = 20 * time.Millisecond })
	tg := &Target{URL: c.Base, PG: pg}
	if err := tg.probe(); err != nil {
		t.Fatal(err)
	}
	r, err := RunOutage(ctx(t), tg, OutageConfig{Batch: 10, Size: 128, Partitions: 3, Conns: 3, Duration: 5 * time.Second, Every: time.Second})
	requireVerified(t, r, err)
	if len(r.Intervals) != 5 || r.Drain == nil || r.Drain.Records == 0 {
		t.Fatalf("outage: %d intervals, drain %+v; want 5 intervals and a spool drained after the outage", len(r.Intervals), r.Drain)
	}
}

// TestOwnBrokerRSS runs a short push on the broker the bench builds and starts itself, the
// only one whose process it can read: the result must carry the broker's RSS for every second
// of the window, and the peak must be the largest of them.
func TestOwnBrokerRSS(t *testing.T) {
	rep := runArgs(t, "push", "--duration", "3s", "--warmup", "0", "--batch", "10", "--conns", "2", "--partitions", "3")
	if rep.Failed || len(rep.Results) != 1 {
		t.Fatalf("failed %v, %d results; want one verified result", rep.Failed, len(rep.Results))
	}
	r := rep.Results[0]
	requireVerified(t, r, nil)
	if n := len(r.BrokerRSSPerSec); n < 3 || n > 4 {
		t.Fatalf("%d seconds of broker RSS for a 3 s window, want 3 (4 with a partial last one): %v", n, r.BrokerRSSPerSec)
	}
	peak := 0.0
	for _, mb := range r.BrokerRSSPerSec {
		if mb <= 0 {
			t.Fatalf("a second without RSS: %v", r.BrokerRSSPerSec)
		}
		peak = max(peak, mb)
	}
	if r.BrokerRSSMB == nil || *r.BrokerRSSMB != peak {
		t.Fatalf("peak RSS %v, want the largest second, %.1f MB", r.BrokerRSSMB, peak)
	}
}

// The seconds above the target are named in the notes, and only they.
func TestRSSOverTargetNoted(t *testing.T) {
	var r Result
	r.setRSS([]int64{40 << 10, 70 << 10, 64 << 10, 90 << 10})
	if r.BrokerRSSMB == nil || *r.BrokerRSSMB != 90 || len(r.BrokerRSSPerSec) != 4 {
		t.Fatalf("peak %v, series %v; want 90 MB over 4 seconds", r.BrokerRSSMB, r.BrokerRSSPerSec)
	}
	if len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "2 of 4 seconds") ||
		!strings.Contains(r.Notes[0], "2: 70 MB, 4: 90 MB") || len(r.Failures) > 0 {
		t.Fatalf("notes %q, failures %q; want one note naming seconds 2 and 4, no failure", r.Notes, r.Failures)
	}
}

// A scrape of a broker with a few hundred queues, after its periodic read saw them.
func TestScrapeSmoke(t *testing.T) {
	db := pgtest.NewDatabase(t)
	c := servertest.Start(t, db, func(c *config.Config) { c.MetricsRefresh = 200 * time.Millisecond })
	tg := &Target{URL: c.Base, PGConn: db}
	if err := tg.probe(); err != nil {
		t.Fatal(err)
	}
	r, err := RunScrape(ctx(t), tg, ScrapeConfig{Queues: 300, Scrapes: 5})
	requireVerified(t, r, err)
	if r.Latency.N != 5 {
		t.Fatalf("scrape: %d scrapes measured, want 5", r.Latency.N)
	}
}

// TestScaleSmoke runs the scale scenario's partitions dimension at 10 and 100 partitions on
// in-process brokers, a fresh database per point: both points must verify with every
// operation measured, and the chart must be an SVG document.
func TestScaleSmoke(t *testing.T) {
	cfg := ScaleConfig{Dims: []string{"partitions"}, Values: []int{10, 100}, Batch: 20, Size: 128, Conns: 2, Consumers: 2,
		Duration: time.Second, AckRate: 2000, AutoRate: 3000,
		Start: func(ctx context.Context, n int) ([]*Target, func() error, error) {
			db := pgtest.NewDatabase(t)
			var ts []*Target
			for range n {
				tg := &Target{URL: servertest.Start(t, db).Base, PGConn: db}
				if err := tg.probe(); err != nil {
					return nil, nil, err
				}
				ts = append(ts, tg)
			}
			return ts, func() error { return nil }, nil
		}}
	results := runScale(ctx(t), cfg)
	ops := map[string]int{}
	for _, r := range results {
		requireVerified(t, r, nil)
		if r.Scale == nil || r.Scale.Prefilled == 0 {
			t.Fatalf("%s: no scale figures or nothing pre-filled: %+v", r.Label, r.Scale)
		}
		ops[r.Scale.Operation]++
	}
	if len(results) != 6 || ops[opPush] != 2 || ops[opPopAck] != 2 || ops[opAutoAck] != 2 {
		t.Fatalf("%d results %v; want push, pop+ack and autoAck at each of the 2 points", len(results), ops)
	}
	dir := t.TempDir()
	files, err := writeScaleCharts(dir, results)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 {
		t.Fatalf("charts %v, want one for the partitions dimension", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		XMLName xml.Name
	}
	if err := xml.Unmarshal(b, &doc); err != nil || doc.XMLName.Local != "svg" {
		t.Fatalf("%s is not an SVG document (root %q): %v", files[0], doc.XMLName.Local, err)
	}
	for _, op := range scaleOps {
		if !strings.Contains(string(b), op) {
			t.Fatalf("the chart has no legend entry %q", op)
		}
	}
}

// TestConsumersGoRoundTheQueuesTogether: whatever order the consumers of one set of readers
// pop in, any run of as many pops as there are queues visits each queue once, so no consumer
// follows another into a queue it has just drained.
func TestConsumersGoRoundTheQueuesTogether(t *testing.T) {
	c, err := newClient("http://127.0.0.1:1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	queues := []string{"q0", "q1", "q2", "q3", "q4"}
	rd := readers{clients: []*client{c}, queues: queues, turn: new(atomic.Int64)}
	var consumers []*consumer
	for slot := range 3 {
		consumers = append(consumers, newConsumer(rd, slot, "", 10, true, nil, nil))
	}
	var visits []string
	for round := range 4 {
		for i := range consumers {
			// A different consumer leads each round, as their pops finish in any order.
			visits = append(visits, consumers[(i+round)%len(consumers)].nextPath())
		}
	}
	for i := 0; i+len(queues) <= len(visits); i++ {
		seen := map[string]bool{}
		for _, v := range visits[i : i+len(queues)] {
			if seen[v] {
				t.Fatalf("pops %d to %d visit %s twice: %q", i, i+len(queues)-1, v, visits)
			}
			seen[v] = true
		}
	}
}

// TestFillSpreadsEvenly pre-fills partitions of several queues with runs that do not divide
// a request: every partition must end with its run, none left empty (an empty queue turns each
// long-poll of a scale point into a one-second wait).
func TestFillSpreadsEvenly(t *testing.T) {
	tg := target(t)
	c, err := tg.client()
	if err != nil {
		t.Fatal(err)
	}
	const run = 90
	queues := []string{freshQueue("fill-a"), freshQueue("fill-b"), freshQueue("fill-c")}
	parts := partitionNames(30)
	led := newLedger(fillProducers)
	var errs errorCounts
	if _, err := fill(ctx(t), "fill", []*client{c}, queues, parts, 64, int64(run*len(parts)), run, led, &errs); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx(t), tg.PGConn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx(t), `SELECT q.name || '/' || p.name, count(m.*) FROM queen.partitions p
		JOIN queen.queues q ON q.id = p.queue_id LEFT JOIN queen.messages m ON m.partition_id = p.id GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for rows.Next() {
		var name string
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		got[name] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	p := newProducer(0, c, queues[0], parts, 64, led, &errs)
	p.queues = queues
	for k, part := range parts {
		if name := p.queueOf(k) + "/" + part; got[name] != run {
			t.Errorf("%s holds %d messages, want %d", name, got[name], run)
		}
	}
}

// restartRig is an in-process broker on a fixed address and the bench's own PostgreSQL
// behind it, both restartable, for the soak.
type restartRig struct {
	t    *testing.T
	addr string
	pg   *benchPG
	cfg  config.Config
	mu   sync.Mutex
	b    *server.Broker
}

func (r *restartRig) start(ctx context.Context) error {
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		return err
	}
	b, err := server.Start(ctx, r.cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		server.Options{ConnString: r.pg.conn, Listener: ln})
	if err != nil {
		ln.Close()
		return err
	}
	r.mu.Lock()
	r.b, r.addr = b, b.Addr()
	r.mu.Unlock()
	return nil
}

func (r *restartRig) stop() error {
	r.mu.Lock()
	b := r.b
	r.b = nil
	r.mu.Unlock()
	if b == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return b.Shutdown(ctx)
}

func (r *restartRig) restartBroker(ctx context.Context) error {
	if err := r.stop(); err != nil {
		return err
	}
	return r.start(ctx)
}

func (r *restartRig) restartPG(ctx context.Context) error {
	if err := r.pg.stop(); err != nil {
		return err
	}
	return r.pg.start(ctx)
}

func (r *restartRig) brokerPID() int { return 0 }

// TestSoakSmoke soaks an in-process broker for 20 s with a PostgreSQL restart and a broker
// restart: the keeping-up consumers must have received every stored message exactly once, in
// order, with no failed request outside the faults, and every interval must be reported.
func TestSoakSmoke(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "queen-bench-soak-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the server's own user enters it when we are root
		t.Fatal(err)
	}
	pg, err := startPG(ctx(t), filepath.Join(dir, "pg"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pg.stop(); err != nil {
			t.Error(err)
		}
	})
	cfg, err := config.Load(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.SpoolDir, cfg.SpoolFlush = filepath.Join(dir, "spool"), 20*time.Millisecond
	rig := &restartRig{t: t, addr: "127.0.0.1:0", pg: pg, cfg: cfg}
	if err := rig.start(ctx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rig.stop(); err != nil {
			t.Error(err)
		}
	})
	tg := &Target{URL: "http://" + rig.addr, PGConn: pg.conn, PG: pg}
	if err := tg.probe(); err != nil {
		t.Fatal(err)
	}
	r, err := RunSoak(ctx(t), tg, rig, SoakConfig{Duration: 20 * time.Second, Every: 5 * time.Second, FaultEvery: 8 * time.Second,
		Faults: []string{"pg", "broker"}, Rate: 500, LagRate: 200, Batch: 10, Size: 128, Partitions: 3, Conns: 2, Consumers: 2})
	requireVerified(t, r, err)
	s := r.Soak
	if len(s.Intervals) != 4 || len(s.Faults) != 2 || s.Faults[0].Kind != "pg" || s.Faults[1].Kind != "broker" {
		t.Fatalf("soak: %d intervals, faults %+v; want 4 intervals, a pg then a broker restart", len(s.Intervals), s.Faults)
	}
	if s.GroupReceived == 0 || s.GroupReceived >= s.Pushed {
		t.Fatalf("soak: the lagging group received %d of %d: want some, and fewer than all", s.GroupReceived, s.Pushed)
	}
	tables := map[string]bool{}
	for _, ts := range s.Tables {
		tables[ts.Name] = ts.Total > 0
	}
	if !tables["queen.segments"] {
		t.Fatalf("soak: no size for queen.segments among %+v", s.Tables)
	}
}

// testCA makes a CA and a certificate it signs for 127.0.0.1, and writes the CA's PEM to a file
// for --ca.
func testCA(t *testing.T) (caFile string, cert tls.Certificate) {
	t.Helper()
	ca := testkit.NewCA(t)
	certPEM, keyPEM := ca.Issue(t, 2, nil, []net.IP{net.IPv4(127, 0, 0, 1)})
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, cert
}

// door is how a test's front door departs from one that forwards every request with a key.
type door struct {
	ownHealth bool     // answers /health itself, to anyone, as a load balancer's health check would, hiding the broker's
	refuse    []string // path prefixes answered 403, as routes the key is not granted
	tenant    string   // sent to the broker in x-queen-tenant, as by a front door serving one tenant
}

// frontDoor starts a TLS reverse proxy before the broker at base that answers 401 to a request
// without "Authorization: Bearer key" and forwards the others without it, as d says. It returns
// the proxy's https URL.
func frontDoor(t *testing.T, base string, cert tls.Certificate, key string, d door) string {
	t.Helper()
	backend, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(backend)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.ownHealth && r.URL.Path == "/health" {
			_, _ = io.WriteString(w, `{"status":"ok"}`)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+key {
			http.Error(w, "missing or wrong API key", http.StatusUnauthorized)
			return
		}
		for _, p := range d.refuse {
			if strings.HasPrefix(r.URL.Path, p) {
				http.Error(w, `{"code":"class_not_granted"}`, http.StatusForbidden)
				return
			}
		}
		r.Header.Del("Authorization") // the front door's key, not the broker's
		if d.tenant != "" {
			r.Header.Set("X-Queen-Tenant", d.tenant)
		}
		proxy.ServeHTTP(w, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestFrontDoorSmoke runs push and wake through a TLS front door that wants an API key, trusted
// through a CA file: once with the broker's /health forwarded, once hidden behind the front
// door's own, where the bench must measure through the API alone and say so.
func TestFrontDoorSmoke(t *testing.T) {
	caFile, cert := testCA(t)
	roots, err := loadCA(caFile)
	if err != nil {
		t.Fatal(err)
	}
	broker := servertest.Start(t, pgtest.NewDatabase(t))
	for _, ownHealth := range []bool{false, true} {
		tg := &Target{URL: frontDoor(t, broker.Base, cert, "k3y", door{ownHealth: ownHealth}), Token: "k3y", RootCAs: roots}
		if err := tg.probe(); err != nil {
			t.Fatal(err)
		}
		if tg.Native == ownHealth {
			t.Fatalf("own /health %v: the probe took the target for this project's broker: %v", ownHealth, tg.Native)
		}
		r, err := RunPush(ctx(t), tg, PushConfig{Batch: 10, Size: 128, Partitions: 3, Conns: 3, Duration: smoke})
		requireVerified(t, r, err)
		if hidden := strings.Contains(strings.Join(r.Notes, "\n"), "measured through its HTTP API alone"); hidden != ownHealth {
			t.Fatalf("own /health %v: push noted the broker hidden: %v (%q)", ownHealth, hidden, r.Notes)
		}
		r, err = RunWake(ctx(t), tg, WakeConfig{Samples: 5, Size: 64})
		requireVerified(t, r, err)
		if r.Latency.N != 5 {
			t.Fatalf("wake: %d samples measured, want 5", r.Latency.N)
		}
	}
}

// TestFrontDoorWake runs wake through front doors that forward /health, so the bench takes the
// broker for this project's, yet stand between it and the parked-pop gauge or fail a sample's
// request. A gauge the bench may not read must cost the fixed wait, said in a note, not a
// gauge wait per sample; a tenant's gauge must be found under its tenant label; a refused pop
// or push must fail at once with the refusal in the report, never pushing for a pop that has
// already answered.
func TestFrontDoorWake(t *testing.T) {
	caFile, cert := testCA(t)
	roots, err := loadCA(caFile)
	if err != nil {
		t.Fatal(err)
	}
	broker := servertest.Start(t, pgtest.NewDatabase(t))
	tenanted := servertest.Start(t, pgtest.NewDatabase(t), func(c *config.Config) { c.TenancyHeader, c.TrustedProxy = true, true })
	const samples = 5
	for _, tc := range []struct {
		name  string
		base  string
		d     door
		check func(t *testing.T, tg *Target, r *Result)
	}{
		{"metrics refused", broker.Base, door{refuse: []string{"/metrics/prometheus"}}, func(t *testing.T, tg *Target, r *Result) {
			requireVerified(t, r, nil)
			if r.Latency.N != samples {
				t.Fatalf("%d samples measured, want %d", r.Latency.N, samples)
			}
			if notes := strings.Join(r.Notes, "\n"); !strings.Contains(notes, "waited 50ms for the pop to park") || !strings.Contains(notes, "HTTP 403") {
				t.Fatalf("no note of the fixed wait and the refused metrics page: %q", r.Notes)
			}
			if cannotRun("scrape", tg) == "" {
				t.Fatal("scrape would run on a front door that refuses the metrics page")
			}
		}},
		{"tenant's gauge", tenanted.Base, door{tenant: "acme"}, func(t *testing.T, tg *Target, r *Result) {
			requireVerified(t, r, nil)
			if r.Latency.N != samples {
				t.Fatalf("%d samples measured, want %d", r.Latency.N, samples)
			}
		}},
		{"pops refused", broker.Base, door{refuse: []string{"/api/v1/pop/"}}, func(t *testing.T, tg *Target, r *Result) {
			fails := strings.Join(r.Failures, "\n")
			if r.Verified || r.Errors.HTTP != samples+wakeWarmup || !strings.Contains(r.Errors.First, "HTTP 403") {
				t.Fatalf("want every sample's pop failed once with the 403; verified %v, errors %+v", r.Verified, r.Errors)
			}
			if strings.Contains(fails, "never showed") || strings.Contains(fails, "never delivered") {
				t.Fatalf("the bench waited on the gauge or pushed for pops that had already failed:\n%s", fails)
			}
		}},
		{"pushes refused", broker.Base, door{refuse: []string{"/api/v1/push"}}, func(t *testing.T, tg *Target, r *Result) {
			fails := strings.Join(r.Failures, "\n")
			if r.Verified || !strings.Contains(fails, "sample 0: the push was not stored, so the run stopped there") || !strings.Contains(r.Errors.First, "HTTP 403") {
				t.Fatalf("want the run stopped at the first refused push, with the 403; errors %+v, failures:\n%s", r.Errors, fails)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := &Target{URL: frontDoor(t, tc.base, cert, "k3y", tc.d), Token: "k3y", RootCAs: roots}
			if err := tg.probe(); err != nil {
				t.Fatal(err)
			}
			if !tg.Native {
				t.Fatal("the probe did not recognise the broker behind a front door that forwards /health")
			}
			r, err := RunWake(ctx(t), tg, WakeConfig{Samples: samples, Size: 64})
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, tg, r)
		})
	}
}

// TestFrontDoorRun runs the command line on two front doors with different keys, --token for
// --url and QUEEN_BENCH_VS_TOKEN for --vs: every round must verify with messages, the key must
// not reach the report, and the ceiling, which no front door can serve, is skipped, not failed.
func TestFrontDoorRun(t *testing.T) {
	caFile, cert := testCA(t)
	broker := servertest.Start(t, pgtest.NewDatabase(t))
	a := frontDoor(t, broker.Base, cert, "alpha", door{})
	b := frontDoor(t, broker.Base, cert, "beta", door{ownHealth: true})
	t.Setenv("QUEEN_BENCH_VS_TOKEN", "beta")
	rep := runArgs(t, "push", "--url", a, "--token", "alpha", "--vs", b, "--ca", caFile,
		"--duration", "1s", "--warmup", "0", "--batch", "10", "--conns", "2", "--partitions", "3")
	if rep.Failed || len(rep.Results) != 4 || len(rep.Comparisons) != 1 {
		t.Fatalf("push A/B: failed %v, %d results, %d comparisons; want 4 verified results and 1 comparison", rep.Failed, len(rep.Results), len(rep.Comparisons))
	}
	for _, r := range rep.Results {
		requireVerified(t, r, nil)
	}
	if cmd := strings.Join(rep.Command, " "); strings.Contains(cmd, "alpha") {
		t.Fatalf("the report's command holds the key: %s", cmd)
	}
	rep = runArgs(t, "ceiling", "--url", a, "--token", "alpha", "--ca", caFile)
	if rep.Failed || len(rep.Results) != 1 || !rep.Results[0].Skipped {
		t.Fatalf("ceiling through a front door: failed %v, results %+v; want one skipped", rep.Failed, rep.Results)
	}
}

// TestBeforeAndAfter compares the working tree with a revision the bench builds and starts
// itself: both targets have their processes' figures, so the comparison covers the CPU a
// message costs as well as the rate.
func TestBeforeAndAfter(t *testing.T) {
	if err := exec.Command("git", "rev-parse", "--verify", "HEAD").Run(); err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	rep := runArgs(t, "push", "--vs-rev", "HEAD", "--duration", "1s", "--warmup", "0", "--batch", "10", "--conns", "2", "--partitions", "3")
	if rep.Failed || len(rep.Results) != 4 {
		t.Fatalf("push --vs-rev: failed %v, %d results; want 4 verified", rep.Failed, len(rep.Results))
	}
	var metrics []string
	for _, c := range rep.Comparisons {
		metrics = append(metrics, c.Metric)
	}
	if want := []string{"msg/s", "broker µs/msg", "PG µs/msg"}; !slices.Equal(metrics, want) {
		t.Errorf("compared %q, want %q", metrics, want)
	}
}

// TestFrontDoorWithoutKey: without the key the run stops at once with an error naming the 401,
// whether the front door guards /health too or answers it to anyone.
func TestFrontDoorWithoutKey(t *testing.T) {
	caFile, cert := testCA(t)
	broker := servertest.Start(t, pgtest.NewDatabase(t))
	t.Setenv("QUEEN_BENCH_TOKEN", "")
	for _, ownHealth := range []bool{false, true} {
		o, err := parseArgs([]string{"push", "--url", frontDoor(t, broker.Base, cert, "k3y", door{ownHealth: ownHealth}), "--ca", caFile, "--duration", "1s"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = execute(ctx(t), o)
		if err == nil || !strings.Contains(err.Error(), "HTTP 401") || !strings.Contains(err.Error(), "--token") {
			t.Fatalf("own /health %v: want an error naming the 401 and --token, got %v", ownHealth, err)
		}
	}
}

// TestVerifierCatchesFaults feeds the verifier deliveries a broken broker could make and checks
// that each is reported: a verification that cannot fail proves nothing.
func TestVerifierCatchesFaults(t *testing.T) {
	parts := partitionNames(2)
	const size = 100
	led := newLedger(1)
	// 0..5 stored (queued or buffered), 6 refused for a full spool.
	led.rows[0] = []uint8{queued, queued, queued, buffered, buffered, buffered, refused}
	led.queued.Store(6)
	msg := func(s int64, k int) popMsg {
		var m popMsg
		if err := json.Unmarshal(appendPayload(nil, 0, s, k, size), &m.Data); err != nil {
			t.Fatal(err)
		}
		m.TransactionID, m.Partition = string(appendTxID(nil, 0, s)), parts[k]
		return m
	}
	batch := func(ms ...popMsg) []popMsg { return ms }

	cases := []struct {
		name    string
		deliver func(g *groupLog)
		want    string // in the failures; "" for none
	}{
		{"all once in order", func(g *groupLog) {
			g.record(batch(msg(0, 0), msg(1, 0), msg(2, 0)), 0, 1)
			g.record(batch(msg(3, 0), msg(4, 0), msg(5, 0)), 2, 3)
		}, ""},
		{"overlapping in time, either order", func(g *groupLog) {
			g.record(batch(msg(3, 0), msg(4, 0), msg(5, 0)), 0, 2)
			g.record(batch(msg(0, 0), msg(1, 0), msg(2, 0)), 1, 3)
		}, ""},
		{"lost", func(g *groupLog) {
			g.record(batch(msg(0, 0), msg(1, 0), msg(2, 0)), 0, 1)
		}, "never delivered"},
		{"duplicated", func(g *groupLog) {
			g.record(batch(msg(0, 0), msg(1, 0), msg(2, 0), msg(3, 0)), 0, 1)
			g.record(batch(msg(3, 0), msg(4, 0), msg(5, 0)), 2, 3)
		}, "more than once"},
		{"later batch first", func(g *groupLog) {
			g.record(batch(msg(3, 0), msg(4, 0), msg(5, 0)), 0, 1)
			g.record(batch(msg(0, 0), msg(1, 0), msg(2, 0)), 2, 3)
		}, "out of push order"},
		{"reordered in a batch", func(g *groupLog) {
			g.record(batch(msg(1, 0), msg(0, 0), msg(2, 0), msg(3, 0), msg(4, 0), msg(5, 0)), 0, 1)
		}, "inside a batch"},
		{"misrouted", func(g *groupLog) {
			m := msg(0, 0)
			m.Partition = parts[1]
			g.record(batch(m, msg(1, 0), msg(2, 0), msg(3, 0), msg(4, 0), msg(5, 0)), 0, 1)
		}, "damaged or misrouted"},
		{"damaged payload", func(g *groupLog) {
			m := msg(0, 0)
			m.Data.R = strings.ToUpper(m.Data.R)
			g.record(batch(m, msg(1, 0), msg(2, 0), msg(3, 0), msg(4, 0), msg(5, 0)), 0, 1)
		}, "damaged or misrouted"},
		{"lost while buffered", func(g *groupLog) {
			g.record(batch(msg(0, 0), msg(1, 0), msg(2, 0), msg(3, 0), msg(4, 0)), 0, 1)
		}, "never delivered"},
		{"refused, yet stored", func(g *groupLog) {
			g.record(batch(msg(0, 0), msg(1, 0), msg(2, 0), msg(3, 0), msg(4, 0), msg(5, 0), msg(6, 0)), 0, 1)
		}, "not stored) were delivered"},
		{"never pushed", func(g *groupLog) {
			g.record(batch(msg(0, 0), msg(1, 0), msg(2, 0), msg(3, 0), msg(4, 0), msg(5, 0), msg(7, 0)), 0, 1)
		}, "no push stored"},
	}
	for _, tc := range cases {
		g := newGroupLog("", parts, size)
		tc.deliver(g)
		fails := strings.Join(g.check(led), "\n")
		switch {
		case tc.want == "" && fails != "":
			t.Errorf("%s: unexpected failures:\n%s", tc.name, fails)
		case tc.want != "" && !strings.Contains(fails, tc.want):
			t.Errorf("%s: want a failure containing %q, got:\n%s", tc.name, tc.want, fails)
		}
	}
}

// TestStreamsVerifierCatchesFaults feeds the streams checks state and sink contents a broken
// broker could leave after two committed cycles of partition p0 (150 messages over windows w0
// and w1), and checks each is reported.
func TestStreamsVerifierCatchesFaults(t *testing.T) {
	tally := newStreamTally()
	tally.add("id0", "p0", map[string]int64{"w0": 100}, 100)
	tally.add("id0", "p0", map[string]int64{"w0": 20, "w1": 30}, 50)
	p := tally.parts["id0"]
	row := func(k string, n int64) stateRowAnswer { return stateRowAnswer{Key: k, Value: windowState{Count: n}} }
	sum := func(n int64) sinkSummary { return sinkSummary{Partition: "p0", Count: n} }
	for _, tc := range []struct {
		name  string
		rows  []stateRowAnswer
		sink  []sinkSummary
		wants []string // in the failures; none for a clean run
	}{
		{"as committed", []stateRowAnswer{row("w0", 120), row("w1", 30)}, []sinkSummary{sum(100), sum(50)}, nil},
		{"a batch counted twice", []stateRowAnswer{row("w0", 220), row("w1", 30)}, []sinkSummary{sum(100), sum(50)},
			[]string{"window w0: the state counts 220, the committed cycles 120"}},
		{"a window lost", []stateRowAnswer{row("w0", 120)}, []sinkSummary{sum(100), sum(50)},
			[]string{"window w1: no state"}},
		{"a window nobody counted", []stateRowAnswer{row("w0", 120), row("w1", 30), row("w7", 1)}, []sinkSummary{sum(100), sum(50)},
			[]string{"window w7: the state counts 1, the committed cycles 0"}},
		{"a summary twice", []stateRowAnswer{row("w0", 120), row("w1", 30)}, []sinkSummary{sum(100), sum(50), sum(50)},
			[]string{"3 summaries for 2 committed cycles", "summaries count 200 messages, the committed cycles 150"}},
		{"a summary lost", []stateRowAnswer{row("w0", 120), row("w1", 30)}, []sinkSummary{sum(100)},
			[]string{"1 summaries for 2 committed cycles", "partition p0: the sink's summaries count 100 messages"}},
	} {
		_, fails := p.checkState(tc.rows)
		got := strings.Join(append(fails, tally.checkSink(tc.sink)...), "\n")
		if len(tc.wants) == 0 && got != "" {
			t.Errorf("%s: unexpected failures:\n%s", tc.name, got)
		}
		for _, w := range tc.wants {
			if !strings.Contains(got, w) {
				t.Errorf("%s: want a failure containing %q, got:\n%s", tc.name, w, got)
			}
		}
	}
}

// The ceiling writes rows of the broker's own message table: the table and the dedup index
// are read from the broker's migrations, and hold every column the ceiling copies.
func TestCeilingTableIsTheBrokers(t *testing.T) {
	schema, err := ceilingSchema()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(schema, "CREATE TABLE bench_ceiling.messages (") || !strings.Contains(schema, "ON bench_ceiling.messages (partition_id, transaction_id)") ||
		strings.Contains(schema, "queen.") {
		t.Fatalf("ceiling schema:\n%s", schema)
	}
	for _, c := range ceilingColumns {
		if !strings.Contains(schema, "\n    "+c+" ") {
			t.Errorf("the broker's message table has no column %s that the ceiling copies", c)
		}
	}
}

// Each scenario starts from its own defaults, takes its own flags and refuses another's, and
// one that needs its own brokers refuses a target.
func TestScenarioFlags(t *testing.T) {
	o, err := parseArgs([]string{"soak"})
	if err != nil || o.duration != 30*time.Minute || o.rate != 2000 || o.lagRate != 1000 || o.batch != 10 || o.set["rate"] {
		t.Fatalf("soak defaults: %+v, %v", o, err)
	}
	if o, err = parseArgs([]string{"soak", "--rate", "500"}); err != nil || o.rate != 500 || o.lagRate != 250 {
		t.Fatalf("soak --rate 500: %+v, %v", o, err)
	}
	if o, err = parseArgs([]string{"ceiling", "--conns", "2"}); err != nil || o.conns != 2 {
		t.Fatalf("ceiling --conns 2: %+v, %v", o, err)
	}
	for _, args := range [][]string{
		{"push", "--groups", "2"}, {"consume", "--dim", "queues"}, {"all", "--batch", "10"}, {"all", "--messages", "5"},
		{"scale", "--url", "http://127.0.0.1:1"}, {"nope"},
	} {
		if _, err := parseArgs(args); err == nil {
			t.Errorf("%v was accepted", args)
		}
	}
}

// The chaos run, short: each fault once with two seconds of load around it, through two
// proxies, two brokers and three Patroni nodes; nothing acknowledged may be lost, nothing
// acknowledged redelivered, and both spools must drain (the long run is `go run ./bench chaos`).
func TestChaosShort(t *testing.T) {
	c, cancel := context.WithTimeout(context.Background(), 6*time.Minute) // Patroni's ttl alone is 20 s
	defer cancel()
	r := runChaos(c, ChaosConfig{Producers: 2, Consumers: 2, Batch: 5, Hold: 2 * time.Second})
	requireVerified(t, r, nil)
	if len(r.Chaos) != 4 {
		t.Fatalf("%d faults reported, want 4: %+v", len(r.Chaos), r.Chaos)
	}
	for _, f := range r.Chaos {
		t.Logf("%+v", f)
	}
}

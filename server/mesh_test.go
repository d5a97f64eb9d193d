package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"queen/config"
	"queen/pg/pgtest"
	"queen/server"
	"queen/testkit"
)

// meshNode is one broker of a mesh test, started with a mesh listener bound beforehand.
type meshNode struct {
	t        testing.TB
	name     string
	base     string
	broker   *server.Broker
	meshAddr string
	hc       *http.Client
}

// Do implements doer.
func (n *meshNode) Do(method, path string, body any) (int, []byte) {
	n.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			n.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, n.base+path, r)
	if err != nil {
		n.t.Fatal(err)
	}
	resp, err := n.hc.Do(req)
	if err != nil {
		n.t.Fatalf("%s: %s %s: %v", n.name, method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		n.t.Fatalf("%s: %s %s: reading body: %v", n.name, method, path, err)
	}
	return resp.StatusCode, out
}

// startMeshNode boots a broker on db with the mesh listening on meshLn; every broker gets the
// same peer list (all three addresses): a broker drops its own address from it.
func startMeshNode(t *testing.T, name, db string, meshLn net.Listener, peers []string, env map[string]string) *meshNode {
	t.Helper()
	_, port, _ := net.SplitHostPort(meshLn.Addr().String())
	vars := map[string]string{
		"QUEEN_SERVER_ID":           name,
		"QUEEN_MESH_PEERS":          strings.Join(peers, ","),
		"QUEEN_MESH_PORT":           port,
		"QUEEN_MESH_BIND_ADDR":      "127.0.0.1",
		"QUEEN_SYNC_SECRET":         "mesh-test-secret-0123456789abcdef",
		"QUEEN_SYNC_ENABLED":        "true",
		"FILE_BUFFER_FLUSH_MS":      "20",
		"QUEEN_BIND_ADDR":           "127.0.0.1",
		"QUEEN_MESH_ADVERTISE_HOST": "127.0.0.1",
	}
	for k, v := range env {
		vars[k] = v
	}
	if vars["FILE_BUFFER_DIR"] == "" {
		vars["FILE_BUFFER_DIR"] = t.TempDir()
	}
	cfg, err := config.Load(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatalf("%s: config: %v", name, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	level := slog.LevelWarn
	if os.Getenv("QUEEN_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("node", name)
	b, err := server.Start(context.Background(), cfg, log, server.Options{ConnString: db, Listener: ln, MeshListener: meshLn})
	if err != nil {
		meshLn.Close()
		t.Fatalf("%s: broker start: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := b.Shutdown(ctx); err != nil {
			t.Errorf("%s: shutdown: %v", name, err)
		}
	})
	return &meshNode{t: t, name: name, base: "http://" + b.Addr(), broker: b, meshAddr: meshLn.Addr().String(), hc: &http.Client{Timeout: 2 * time.Minute}}
}

// meshReady waits until n sees every other broker connected (outbound) and alive (frames in).
func meshReady(t *testing.T, n *meshNode, peers int) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, n.name+" to see its peers connected and alive", func() bool {
		s := shared(t, n)
		if !s.Enabled || s.PeerCount != peers || len(s.Peers) != peers {
			return false
		}
		for _, p := range s.Peers {
			if !p.Connected || !p.Alive || p.Host == "" {
				return false
			}
		}
		return true
	})
}

// TestThreeBrokerMesh runs three brokers on one database, meshed on loopback with a secret.
// A pop parked on B is answered by a push through A with the pushed message (B's own re-check
// schedule is set beyond the pop's timeout, and a timed-out pop has no messages, so only the
// mesh's wake-up can deliver it); pop and push maintenance turned on at A hold at B and C (the
// periodic flag re-read is set to an hour, so only the mesh can carry them); a broker restarted
// while maintenance is on comes back in maintenance; turning it off at A drains every broker's
// spool, and every spooled push is delivered once.
func TestThreeBrokerMesh(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	lns := make([]net.Listener, 3)
	addrs := make([]string, 3)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i], addrs[i] = ln, ln.Addr().String()
	}
	common := map[string]string{"QUEEN_CACHE_REFRESH_INTERVAL_MS": "3600000"}
	envB := map[string]string{
		"QUEEN_CACHE_REFRESH_INTERVAL_MS": "3600000",
		// B's parked pops re-check only after a minute, beyond popTimeout: a delivery to a pop
		// parked there is the mesh's doing.
		"POP_WAIT_INITIAL_INTERVAL_MS": "60000", "POP_WAIT_MAX_INTERVAL_MS": "60000",
	}
	spoolC := t.TempDir()
	envC := map[string]string{"QUEEN_CACHE_REFRESH_INTERVAL_MS": "3600000", "FILE_BUFFER_DIR": spoolC}
	a := startMeshNode(t, "mesh-a", db, lns[0], addrs, common)
	b := startMeshNode(t, "mesh-b", db, lns[1], addrs, envB)
	c := startMeshNode(t, "mesh-c", db, lns[2], addrs, envC)
	nodes := []*meshNode{a, b, c}
	for _, n := range nodes {
		meshReady(t, n, 2)
	}
	for _, n := range nodes {
		s := shared(t, n)
		if s.ServerID != n.name || !s.Authenticated || s.MaintenanceMode || s.PopMaintenanceMode {
			t.Fatalf("%s shared state: %+v", n.name, s)
		}
		ids := map[string]bool{}
		for _, p := range s.Peers {
			ids[p.ServerID] = true
			if p.Host == n.meshAddr {
				t.Errorf("%s lists itself as a peer: %+v", n.name, s.Peers)
			}
		}
		for _, o := range nodes {
			if o != n && !ids[o.name] {
				t.Errorf("%s does not see %s: %+v", n.name, o.name, s.Peers)
			}
		}
	}

	// 1. A pop parked on B is answered by a push through A.
	const queue = "meshq"
	const popTimeout = 30 * time.Second
	for _, q := range []string{queue, "meshidle"} {
		if status, body := b.Do("POST", "/api/v1/configure", map[string]any{"queue": q}); status != 200 {
			t.Fatalf("configure %s: %d %s", q, status, body)
		}
	}
	done := asyncPop(b, "/api/v1/pop/queue/"+queue+"?wait=true&batch=10&timeout="+strconv.Itoa(int(popTimeout.Milliseconds())))
	testkit.WaitFor(t, 10*time.Second, "the pop to park on B", func() bool {
		select {
		case o := <-done:
			t.Fatalf("the pop on B answered before any push: %+v %v", o.p, o.err)
		default:
		}
		return parkedOn(t, b, queue) == 1
	})
	pushWant(t, a, 200, "queued", item{"queue": queue, "payload": map[string]any{"via": "a"}})
	pushedAt := time.Now()
	o := <-done
	if o.err != nil {
		t.Fatalf("pop on B: %v", o.err)
	}
	if len(o.p.Messages) != 1 || string(o.p.Messages[0].Data) != `{"via":"a"}` {
		t.Fatalf("pop on B: %+v", o.p)
	}
	t.Logf("mesh wake latency: pop on B answered %v after A answered the push", o.at.Sub(pushedAt))
	ackAllOn(t, b, "", o.p.Messages)

	// 2. Pop maintenance turned on at A answers a pop parked on B (a pop that reaches its
	// timeout on B, which does not know of pop maintenance, is not paused), and pauses pops on C.
	const idle = "meshidle"
	done = asyncPop(b, "/api/v1/pop/queue/"+idle+"?wait=true&batch=10&timeout="+strconv.Itoa(int(popTimeout.Milliseconds())))
	testkit.WaitFor(t, 10*time.Second, "a second pop to park on B", func() bool { return parkedOn(t, b, idle) == 1 })
	setPopMaint(t, a, true)
	popOn := time.Now()
	o = <-done
	if o.err != nil || !o.p.Paused || len(o.p.Messages) != 0 {
		t.Fatalf("pop parked on B when pop maintenance was turned on at A: %+v %v", o.p, o.err)
	}
	t.Logf("pop maintenance on at A released the pop parked on B %v after A answered", o.at.Sub(popOn))
	testkit.WaitFor(t, 10*time.Second, "C to turn pop maintenance on", func() bool { return shared(t, c).PopMaintenanceMode })
	t.Logf("pop maintenance on at A seen by C within %v", time.Since(popOn))
	if p := popWith(t, c, "/api/v1/pop/queue/"+queue, "batch", "10", "wait", "true", "timeout", "30000"); !p.Paused {
		t.Fatalf("pop on C under pop maintenance set at A: %+v", p)
	}
	setPopMaint(t, a, false)
	for _, n := range []*meshNode{b, c} {
		testkit.WaitFor(t, 10*time.Second, n.name+" to turn pop maintenance off", func() bool { return !shared(t, n).PopMaintenanceMode })
	}

	// 3. Push maintenance turned on at A holds at B and C.
	setPushMaint(t, a, true)
	on := time.Now()
	for _, n := range []*meshNode{b, c} {
		testkit.WaitFor(t, 10*time.Second, n.name+" to turn push maintenance on", func() bool { return shared(t, n).MaintenanceMode })
		t.Logf("push maintenance on at A seen by %s within %v", n.name, time.Since(on))
	}
	// Each broker spools into its own partition: the spools drain independently, so the order
	// to check is per broker.
	perBroker := []string{"pa", "pa", "pa", "pb", "pb", "pb", "pc", "pc", "pc", "pc", "pc", "pc"}
	for i, n := range nodes {
		pushWant(t, n, 201, "buffered", numbered(queue, perBroker, 3*i, 3)...)
	}

	// 4. C restarts while maintenance is on, on the same mesh address and spool: it comes
	// back in maintenance, from queen.system_state (the periodic re-read is an hour away, and
	// no peer re-sends the flag).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.broker.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown C: %v", err)
	}
	ln, err := net.Listen("tcp", c.meshAddr)
	if err != nil {
		t.Fatalf("cannot bind C's mesh address %s again: %v", c.meshAddr, err)
	}
	c2 := startMeshNode(t, "mesh-c", db, ln, addrs, envC)
	if s := shared(t, c2); !s.MaintenanceMode {
		t.Fatalf("C restarted while maintenance is on is not in maintenance: %+v", s)
	}
	if bs := buffers(t, c2); bs.Pending != 3 {
		t.Fatalf("C's spool after the restart: %+v, want 3 pending", bs)
	}
	pushWant(t, c2, 201, "buffered", numbered(queue, perBroker, 9, 3)...)
	nodes = []*meshNode{a, b, c2}
	for _, n := range nodes {
		meshReady(t, n, 2)
	}

	// 5. Off at A: every broker turns it off and drains its own spool.
	setPushMaint(t, a, false)
	off := time.Now()
	for _, n := range []*meshNode{b, c2} {
		testkit.WaitFor(t, 10*time.Second, n.name+" to turn push maintenance off", func() bool { return !shared(t, n).MaintenanceMode })
		t.Logf("push maintenance off at A seen by %s within %v", n.name, time.Since(off))
	}
	for _, n := range nodes {
		testkit.WaitFor(t, 30*time.Second, n.name+"'s spool to drain", func() bool { return buffers(t, n).Pending == 0 })
	}
	got := consumeAll(t, a, queue, "")
	checkNumbered(t, "spooled through the three brokers", got, queue, perBroker, 0, 12)

	for _, n := range nodes {
		s := shared(t, n)
		t.Logf("%s mesh: sent %d, received %d, dropped %d frames; handshake failures %d, MAC failures %d",
			n.name, s.MessagesSent, s.MessagesReceived, s.MessagesDropped, s.HandshakeFailures, s.SignatureFailures)
		if s.MessagesSent == 0 || s.MessagesReceived == 0 {
			t.Errorf("%s: no frames sent or received: %+v", n.name, s)
		}
		if s.SignatureFailures != 0 || s.SequenceRejections != 0 || s.OversizedFrames != 0 {
			t.Errorf("%s: frame failures among honest brokers: %+v", n.name, s)
		}
	}
}

// parkedOn reads a broker's parked-pop gauge for queue.
func parkedOn(t testing.TB, c doer, queue string) int {
	t.Helper()
	_, body := c.Do("GET", "/metrics/prometheus", nil)
	prefix := `queen_queue_parked_consumers{queue="` + queue + `"} `
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

func ackAllOn(t testing.TB, c doer, group string, msgs []message) {
	t.Helper()
	acks := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		acks[i] = map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": "completed"}
	}
	for _, r := range call[[]ackResult](t, c, "POST", "/api/v1/ack/batch", map[string]any{"consumerGroup": group, "acknowledgments": acks}, 200) {
		if !r.Success {
			t.Fatalf("ack: %+v", r)
		}
	}
}

type popOutcome2 struct {
	p   pausablePop
	at  time.Time
	err error
}

// asyncPop runs a (long-poll) pop on n in a goroutine.
func asyncPop(n *meshNode, path string) <-chan popOutcome2 {
	done := make(chan popOutcome2, 1)
	go func() {
		var o popOutcome2
		status, raw, err := rawDo(n.hc, n.base, "GET", path, nil)
		o.at = time.Now()
		switch {
		case err != nil:
			o.err = err
		case status != 200:
			o.err = fmt.Errorf("status %d: %s", status, raw)
		default:
			o.err = json.Unmarshal(raw, &o.p)
		}
		done <- o
	}()
	return done
}

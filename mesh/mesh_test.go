package mesh

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"queen/testkit"
)

var testSecret = []byte("test-secret-0123456789abcdef")

// recorder is a Handler that reports every call on a channel.
type recorder struct {
	msgs, configs   chan string
	maint, popMaint chan bool
}

func newRecorder() *recorder {
	return &recorder{
		msgs: make(chan string, 4096), configs: make(chan string, 64),
		maint: make(chan bool, 64), popMaint: make(chan bool, 64),
	}
}

func (r *recorder) MessageAvailable(q, p string)  { r.msgs <- q + "/" + p }
func (r *recorder) QueueConfigChanged(q string)   { r.configs <- q }
func (r *recorder) MaintenanceChanged(on bool)    { r.maint <- on }
func (r *recorder) PopMaintenanceChanged(on bool) { r.popMaint <- on }

// untouched fails if the handler was called at all.
func (r *recorder) untouched(t *testing.T) {
	t.Helper()
	if n := len(r.msgs) + len(r.configs) + len(r.maint) + len(r.popMaint); n > 0 {
		t.Fatalf("handler called %d times", n)
	}
}

func expect[T comparable](t *testing.T, what string, ch <-chan T, want T) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("%s: got %v, want %v", what, got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing received, want %v", what, want)
	}
}

// waitFor waits for what a test cannot be told of directly, with a generous bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, what, cond)
}

// logBuf is a log a test waits on.
type logBuf struct{ testkit.LogBuffer }

func (l *logBuf) contains(t *testing.T, s string) {
	t.Helper()
	waitFor(t, "log line "+s, func() bool { return strings.Contains(l.String(), s) })
}

type node struct {
	m       *Mesh
	h       *recorder
	log     *logBuf
	metrics *metrics.Set
}

// metric returns the value line of one series in the node's metrics set.
func (n *node) metric(name string) string {
	var b bytes.Buffer
	n.metrics.WritePrometheus(&b)
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, name+" ") {
			return l
		}
	}
	return ""
}

// startNode starts a mesh with cfg (Heartbeat/DeadAfter shortened unless set) and closes it at
// the end of the test, printing its log if the test failed.
func startNode(t *testing.T, cfg Config) *node {
	t.Helper()
	n := &node{h: newRecorder(), log: &logBuf{}, metrics: metrics.NewSet()}
	cfg.Metrics = n.metrics
	cfg.Log = slog.New(slog.NewTextHandler(n.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 50 * time.Millisecond
	}
	if cfg.DeadAfter == 0 {
		cfg.DeadAfter = time.Second
	}
	m, err := start(cfg, n.h)
	if err != nil {
		t.Fatal(err)
	}
	n.m = m
	t.Cleanup(func() {
		m.Close()
		if t.Failed() {
			t.Logf("log of %s:\n%s", cfg.ServerID, n.log.String())
		}
	})
	return n
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// cluster starts len(ids) fully meshed nodes configured like base.
func cluster(t *testing.T, base Config, ids ...string) []*node {
	t.Helper()
	lns := make([]net.Listener, len(ids))
	for i := range ids {
		lns[i] = listen(t)
	}
	nodes := make([]*node, len(ids))
	for i, id := range ids {
		var peers []string
		for j := range ids {
			if j != i {
				peers = append(peers, lns[j].Addr().String())
			}
		}
		cfg := base
		cfg.ServerID, cfg.Listener, cfg.Peers = id, lns[i], peers
		nodes[i] = startNode(t, cfg)
	}
	for _, n := range nodes {
		waitMeshed(t, n, len(ids)-1)
	}
	return nodes
}

// waitMeshed waits until n is connected to, and hears from, want peers.
func waitMeshed(t *testing.T, n *node, want int) {
	t.Helper()
	waitFor(t, n.m.cfg.ServerID+" meshed", func() bool {
		ok := 0
		for _, p := range n.m.Stats().Peers {
			if p.Connected && p.Alive {
				ok++
			}
		}
		return ok == want
	})
}

func peerStats(m *Mesh, serverID string) PeerStats {
	for _, p := range m.Stats().Peers {
		if p.ServerID == serverID {
			return p
		}
	}
	return PeerStats{}
}

func TestMeshDeliversBetweenThreeNodes(t *testing.T) {
	n := cluster(t, Config{Secret: testSecret}, "a", "b", "c")
	a, others := n[0], n[1:]

	a.m.MessageAvailable("orders", []string{"p1"})
	for _, o := range others {
		expect(t, "single wake", o.h.msgs, "orders/p1")
	}
	a.m.MessageAvailable("orders", []string{"p2", "p3"})
	for _, o := range others {
		expect(t, "batch wake", o.h.msgs, "orders/p2")
		expect(t, "batch wake", o.h.msgs, "orders/p3")
	}
	a.m.MessageAvailable("events", nil)
	for _, o := range others {
		expect(t, "any-partition wake", o.h.msgs, "events/")
	}
	a.m.QueueConfigChanged("orders", false)
	a.m.QueueConfigChanged("gone", true)
	for _, o := range others {
		expect(t, "config set", o.h.configs, "orders")
		expect(t, "config delete", o.h.configs, "gone")
	}
	a.m.SetMaintenance(true)
	a.m.SetPopMaintenance(true)
	for _, o := range others {
		expect(t, "push maintenance", o.h.maint, true)
		expect(t, "pop maintenance", o.h.popMaint, true)
	}
	// The mesh is one-way per connection and never echoes: a's own handler saw nothing.
	a.h.untouched(t)

	s := a.m.Stats()
	if !s.Authenticated || s.ServerID != "a" || len(s.Peers) != 2 {
		t.Fatalf("stats = %+v", s)
	}
	if s.FramesSent == 0 || s.HandshakeFailures+s.MACFailures+s.SequenceRejections+s.OversizedFrames != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestMeshHeartbeatsKeepPeersAlive(t *testing.T) {
	// DeadAfter is twenty heartbeats: a busy test machine does not make a live peer look dead.
	n := cluster(t, Config{Secret: testSecret, DeadAfter: time.Second}, "a", "b", "c")
	a := n[0]
	dead := a.m.cfg.DeadAfter
	t0 := peerStats(a.m, "b").LastSeen
	// Nothing but heartbeats flows; b must stay alive for several dead-after windows.
	waitFor(t, "b's last-seen to move past two dead-after windows", func() bool {
		p := peerStats(a.m, "b")
		if !p.Alive || !p.Connected {
			t.Fatalf("b reported %+v while heartbeating", p)
		}
		return p.LastSeen.Sub(t0) > 2*dead
	})
	if got := n[1].m.Stats().FramesReceived; got == 0 {
		t.Fatal("b received no heartbeat")
	}

	n[2].m.Close()
	waitFor(t, "c reported dead and disconnected", func() bool {
		p := peerStats(a.m, "c")
		return !p.Alive && !p.Connected && !p.LastSeen.IsZero()
	})
	if p := peerStats(a.m, "b"); !p.Alive {
		t.Fatalf("b reported dead: %+v", p)
	}
	for _, want := range []string{`queen_servers{state="alive"} 1`, `queen_servers{state="dead"} 1`} {
		if got := a.metric(want[:len(want)-2]); got != want {
			t.Errorf("metric line %q, want %q", got, want)
		}
	}
}

func TestMeshReconnectsToRestartedNode(t *testing.T) {
	lnA, lnB := listen(t), listen(t)
	addrA, addrB := lnA.Addr().String(), lnB.Addr().String()
	a := startNode(t, Config{ServerID: "a", Listener: lnA, Peers: []string{addrB}, Secret: testSecret})
	b := startNode(t, Config{ServerID: "b", Listener: lnB, Peers: []string{addrA}, Secret: testSecret})
	waitMeshed(t, a, 1)
	waitMeshed(t, b, 1)

	b.m.Close()
	waitFor(t, "a to notice b left", func() bool { return !peerStats(a.m, "b").Connected })
	b2 := startNode(t, Config{ServerID: "b", ListenAddr: addrB, Peers: []string{addrA}, Secret: testSecret})
	waitMeshed(t, b2, 1)
	waitMeshed(t, a, 1)

	a.m.SetMaintenance(true)
	expect(t, "maintenance at restarted b", b2.h.maint, true)
	b2.m.SetPopMaintenance(true)
	expect(t, "pop maintenance from restarted b", a.h.popMaint, true)
	b.h.untouched(t)
}

func TestMeshWithoutSecret(t *testing.T) {
	n := cluster(t, Config{}, "a", "b")
	n[0].log.contains(t, "mesh is unauthenticated: QUEEN_SYNC_SECRET is empty; firewall the mesh port to the peer brokers")
	n[0].m.MessageAvailable("q", []string{"p"})
	expect(t, "wake without secret", n[1].h.msgs, "q/p")
	n[1].m.SetMaintenance(true)
	expect(t, "maintenance without secret", n[0].h.maint, true)
	if s := n[0].m.Stats(); s.Authenticated {
		t.Fatalf("stats = %+v", s)
	}
}

func TestMeshWithDifferentSecretsNeverConnects(t *testing.T) {
	lnA, lnB := listen(t), listen(t)
	a := startNode(t, Config{ServerID: "a", Listener: lnA, Peers: []string{lnB.Addr().String()}, Secret: testSecret})
	b := startNode(t, Config{ServerID: "b", Listener: lnB, Peers: []string{lnA.Addr().String()}, Secret: []byte("some-other-secret-0123456789")})
	for _, n := range []*node{a, b} {
		waitFor(t, "handshake failures", func() bool { return n.m.Stats().HandshakeFailures >= 2 })
		if s := n.m.Stats(); s.Peers[0].Connected || s.Peers[0].Alive {
			t.Fatalf("connected despite different secrets: %+v", s.Peers)
		}
		n.log.contains(t, "bad mac")
	}
	a.m.SetMaintenance(true)
	waitFor(t, "frame dropped", func() bool { return a.m.Stats().FramesDropped == 1 })
	b.h.untouched(t)
}

// A broker with a secret refuses a listener that cannot prove it holds the secret too.
func TestDialerRefusesUnprovenListener(t *testing.T) {
	fake := listen(t)
	defer fake.Close()
	go func() {
		for {
			conn, err := fake.Accept()
			if err != nil {
				return
			}
			writeHandshakeFrame(conn, TypeChallenge, challengeMsg{Nonce: newNonce()})
			var hello helloMsg
			readHandshakeFrame(conn, TypeHello, &hello)
			// The ack an attacker can produce: no mac, or one under a guessed secret.
			writeHandshakeFrame(conn, TypeHelloAck, helloAckMsg{ServerID: "fake", MAC: ackMAC([]byte("guess"), hello.Nonce, hello.Challenge, "fake")})
			conn.Close()
		}
	}()
	n := startNode(t, Config{ServerID: "a", Peers: []string{fake.Addr().String()}, Secret: testSecret})
	waitFor(t, "handshake failure", func() bool { return n.m.Stats().HandshakeFailures >= 1 })
	n.log.contains(t, "hello ack from \\\"fake\\\" has a bad mac")
	if p := n.m.Stats().Peers[0]; p.Connected {
		t.Fatalf("connected to an unproven listener: %+v", p)
	}
}

// Sending never blocks: frames for a peer that is down, or whose queue is full, are dropped
// and counted.
func TestSendDropsInsteadOfBlocking(t *testing.T) {
	t.Run("peer down", func(t *testing.T) {
		ln := listen(t)
		addr := ln.Addr().String()
		ln.Close()
		n := startNode(t, Config{ServerID: "a", Peers: []string{addr}, Secret: testSecret})
		for range 100 {
			n.m.MessageAvailable("q", []string{"p"})
		}
		waitFor(t, "100 drops", func() bool { return n.m.Stats().FramesDropped == 100 })
	})
	t.Run("queue full", func(t *testing.T) {
		// A listener that completes the handshake and then never reads: the socket buffers
		// fill, then the 1024-frame queue, then frames are dropped.
		fake := listen(t)
		defer fake.Close()
		held := make(chan net.Conn, 1)
		go func() {
			conn, err := fake.Accept()
			if err != nil {
				return
			}
			if _, err := acceptHandshake(conn, "stuck", testSecret); err == nil {
				held <- conn
			}
		}()
		n := startNode(t, Config{ServerID: "a", Peers: []string{fake.Addr().String()}, Secret: testSecret, DeadAfter: time.Minute})
		waitFor(t, "connected", func() bool { return n.m.Stats().Peers[0].Connected })
		// The peer never reads: a send that waited for room would never return.
		sent := make(chan struct{})
		go func() {
			defer close(sent)
			partition := strings.Repeat("x", 1000)
			for i := range 20000 {
				n.m.MessageAvailable("q", []string{fmt.Sprint(partition, i)})
			}
		}()
		select {
		case <-sent:
		case <-time.After(time.Minute):
			t.Fatal("20000 sends to a peer that does not read have not returned: a send waits for room")
		}
		waitFor(t, "drops", func() bool { return n.m.Stats().FramesDropped > 0 })
		if c := <-held; c != nil {
			c.Close()
		}
	})
}

func TestStartRefusesBadConfig(t *testing.T) {
	if _, err := start(Config{}, nil); err == nil {
		t.Fatal("started without a server id")
	}
	ln := listen(t)
	defer ln.Close()
	if _, err := start(Config{ServerID: "a", ListenAddr: ln.Addr().String()}, nil); err == nil || !strings.Contains(err.Error(), "cannot listen") {
		t.Fatalf("err = %v, want a bind error", err)
	}
}

// Close leaves nothing running: no goroutine, no connection, no listener.
func TestCloseReleasesEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	lnA, lnB := listen(t), listen(t)
	addrA := lnA.Addr().String()
	a, err := start(Config{ServerID: "a", Listener: lnA, Peers: []string{lnB.Addr().String(), "127.0.0.1:1"}, Secret: testSecret, Heartbeat: 20 * time.Millisecond}, newRecorder())
	if err != nil {
		t.Fatal(err)
	}
	b, err := start(Config{ServerID: "b", Listener: lnB, Peers: []string{addrA}, Secret: testSecret, Heartbeat: 20 * time.Millisecond}, newRecorder())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "connected", func() bool { return peerStats(a, "b").Connected && peerStats(b, "a").Connected })
	a.MessageAvailable("q", []string{"p"})
	a.Close()
	b.Close()
	a.Close() // idempotent
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
	if ln, err := net.Listen("tcp", addrA); err != nil {
		t.Fatalf("listen address still taken: %v", err)
	} else {
		ln.Close()
	}
}

func TestLivenessIsBounded(t *testing.T) {
	n := target(t, nil)
	for i := range maxTrackedServers + 50 {
		n.m.liveness(fmt.Sprint("id-", i)).Store(int64(i + 1))
	}
	s := n.m.Stats()
	if len(s.Peers) != maxTrackedServers {
		t.Fatalf("%d server ids tracked, want %d", len(s.Peers), maxTrackedServers)
	}
	if peerStats(n.m, "id-0").ServerID != "" || peerStats(n.m, fmt.Sprint("id-", maxTrackedServers+49)).ServerID == "" {
		t.Fatal("the longest-silent ids were not the ones forgotten")
	}
}

// start is New then Accept, as the broker does.
func start(cfg Config, h Handler) (*Mesh, error) {
	m, err := New(cfg)
	if err != nil {
		return nil, err
	}
	m.Accept(h)
	return m, nil
}

package mesh

import (
	"bytes"
	"crypto/hmac"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// These tests talk to a node's mesh port over raw TCP, playing the dialer by hand.

// target starts a node that listens and dials nobody.
func target(t *testing.T, secret []byte) *node {
	return startNode(t, Config{ServerID: "target", ListenAddr: "127.0.0.1:0", Secret: secret})
}

func rawDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	return rawDialFrom(t, "", addr)
}

// rawDialFrom dials from the local IP address from ("" = the system's choice). Every address
// of 127.0.0.0/8 is local on Linux, so a test can play several hosts.
func rawDialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	var d net.Dialer
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func readChallenge(t *testing.T, conn net.Conn) []byte {
	t.Helper()
	var ch challengeMsg
	if err := readHandshakeFrame(conn, TypeChallenge, &ch); err != nil {
		t.Fatalf("no challenge: %v", err)
	}
	return ch.Nonce
}

func helloPayload(t *testing.T, secret, nonceL, nonceD []byte, id string) []byte {
	t.Helper()
	h := helloMsg{ServerID: id, Nonce: nonceD, Challenge: nonceL}
	if len(secret) > 0 {
		h.MAC = helloMAC(secret, nonceL, nonceD, id)
	}
	p, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// expectClosed asserts the node closed conn without answering (the listener never writes after
// its HELLO_ACK, and writes nothing at all to a refused HELLO).
func expectClosed(t *testing.T, conn net.Conn) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := conn.Read(make([]byte, 64))
	if n > 0 || err == nil {
		t.Fatalf("node answered %d bytes instead of closing", n)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("node kept the connection open")
	}
}

// rawClient is an authenticated dialer driven by the test.
type rawClient struct {
	conn  net.Conn
	key   []byte
	seq   uint64
	hello []byte // the HELLO payload it sent, for replay
}

func handshake(t *testing.T, addr string, secret []byte) *rawClient {
	t.Helper()
	return handshakeOn(t, rawDial(t, addr), secret)
}

// handshakeOn plays the dialer's handshake on conn, with the server id "tester".
func handshakeOn(t *testing.T, conn net.Conn, secret []byte) *rawClient {
	t.Helper()
	nonceL, nonceD := readChallenge(t, conn), newNonce()
	hello := helloPayload(t, secret, nonceL, nonceD, "tester")
	if err := WriteFrame(conn, TypeHello, hello); err != nil {
		t.Fatal(err)
	}
	var ack helloAckMsg
	if err := readHandshakeFrame(conn, TypeHelloAck, &ack); err != nil {
		t.Fatalf("no hello ack: %v", err)
	}
	if ack.ServerID != "target" {
		t.Fatalf("bad hello ack %+v", ack)
	}
	c := &rawClient{conn: conn, hello: hello}
	if len(secret) > 0 {
		if !hmac.Equal(ack.MAC, ackMAC(secret, nonceD, nonceL, "target")) {
			t.Fatalf("bad hello ack mac %+v", ack)
		}
		c.key = sessionKey(secret, nonceL, nonceD)
	}
	return c
}

func (c *rawClient) sealed(t *testing.T, seq uint64, typ byte, body string) []byte {
	t.Helper()
	p, err := SealEnvelope(c.key, seq, typ, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (c *rawClient) write(t *testing.T, typ byte, payload []byte) {
	t.Helper()
	if err := WriteFrame(c.conn, typ, payload); err != nil {
		t.Fatal(err)
	}
}

// send writes a correctly sealed frame with the next sequence number.
func (c *rawClient) send(t *testing.T, typ byte, body string) {
	t.Helper()
	c.seq++
	c.write(t, typ, c.sealed(t, c.seq, typ, body))
}

const wake = `{"queue":"q","partition":"p"}`

func TestReplayedHelloIsRefused(t *testing.T) {
	n := target(t, testSecret)
	c := handshake(t, n.m.Addr(), testSecret)
	c.send(t, TypeMessageAvailable, wake)
	expect(t, "wake on the genuine connection", n.h.msgs, "q/p")
	c.conn.Close()

	conn := rawDial(t, n.m.Addr())
	readChallenge(t, conn)
	if err := WriteFrame(conn, TypeHello, c.hello); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, conn)
	waitFor(t, "handshake failure counted", func() bool { return n.m.Stats().HandshakeFailures == 1 })
	n.log.contains(t, "replayed hello")
	n.h.untouched(t)
}

func TestWrongSecretIsRefused(t *testing.T) {
	for _, tc := range []struct {
		secret []byte
		log    string
	}{
		{[]byte("wrong-secret-0123456789abcdef"), "bad mac (wrong QUEEN_SYNC_SECRET?)"},
		{nil, "carries no mac"},
	} {
		// A node each: a second refusal for the same reason within warnInterval is counted
		// but not logged.
		n := target(t, testSecret)
		conn := rawDial(t, n.m.Addr())
		nonceL := readChallenge(t, conn)
		if err := WriteFrame(conn, TypeHello, helloPayload(t, tc.secret, nonceL, newNonce(), "intruder")); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, conn)
		waitFor(t, "handshake failure counted", func() bool { return n.m.Stats().HandshakeFailures == 1 })
		n.log.contains(t, tc.log)
		n.h.untouched(t)
	}
}

func TestForgedFrameIsRefused(t *testing.T) {
	n := target(t, testSecret)
	cases := []struct {
		name    string
		typ     byte
		payload func(c *rawClient) []byte
	}{
		{"wrong key", TypeMaintenanceModeSet, func(c *rawClient) []byte {
			p, _ := SealEnvelope([]byte("attacker's guess"), 2, TypeMaintenanceModeSet, []byte(`{"enabled":true}`))
			return p
		}},
		{"altered body", TypeMaintenanceModeSet, func(c *rawClient) []byte {
			return bytes.Replace(c.sealed(t, 2, TypeMaintenanceModeSet, `{"enabled":false}`), []byte("false"), []byte("true"), 1)
		}},
		{"retyped", TypeMaintenanceModeSet, func(c *rawClient) []byte {
			return c.sealed(t, 2, TypeHeartbeat, `{"enabled":true}`)
		}},
		{"reference-style plain frame", TypeMaintenanceModeSet, func(c *rawClient) []byte {
			return []byte(`{"enabled":true}`)
		}},
		{"empty frame", TypeMaintenanceModeSet, func(c *rawClient) []byte { return nil }},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := handshake(t, n.m.Addr(), testSecret)
			c.send(t, TypeMessageAvailable, wake) // seq 1: the session works
			expect(t, "wake before the forgery", n.h.msgs, "q/p")
			c.write(t, tc.typ, tc.payload(c))
			expectClosed(t, c.conn)
			waitFor(t, "mac failure counted", func() bool { return n.m.Stats().MACFailures == int64(i+1) })
			n.h.untouched(t)
		})
	}
	n.log.contains(t, "mesh connection refused: frame authentication failed")
	if got := n.metric(`queen_mesh_refused_total{reason="mac"}`); got != `queen_mesh_refused_total{reason="mac"} 5` {
		t.Fatalf("metric line %q", got)
	}
	if s := n.m.Stats(); s.SequenceRejections != 0 || s.HandshakeFailures != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestReplayedOrReorderedFrameIsRefused(t *testing.T) {
	n := target(t, testSecret)
	cases := []struct {
		name   string
		frames func(c *rawClient) [][]byte // all sealed as TypeMessageAvailable
		wakes  int                         // how many are delivered before the refusal
	}{
		{"same seq again", func(c *rawClient) [][]byte {
			f := c.sealed(t, 1, TypeMessageAvailable, wake)
			return [][]byte{f, f}
		}, 1},
		{"seq skipped", func(c *rawClient) [][]byte {
			return [][]byte{c.sealed(t, 1, TypeMessageAvailable, wake), c.sealed(t, 3, TypeMessageAvailable, wake)}
		}, 1},
		{"reordered", func(c *rawClient) [][]byte {
			return [][]byte{c.sealed(t, 2, TypeMessageAvailable, wake), c.sealed(t, 1, TypeMessageAvailable, wake)}
		}, 0},
		{"seq zero", func(c *rawClient) [][]byte {
			return [][]byte{c.sealed(t, 0, TypeMessageAvailable, wake)}
		}, 0},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := handshake(t, n.m.Addr(), testSecret)
			for _, f := range tc.frames(c) {
				c.write(t, TypeMessageAvailable, f)
			}
			expectClosed(t, c.conn)
			waitFor(t, "sequence rejection counted", func() bool { return n.m.Stats().SequenceRejections == int64(i+1) })
			for range tc.wakes {
				expect(t, "wake before the refusal", n.h.msgs, "q/p")
			}
			n.h.untouched(t)
		})
	}
	t.Run("frame from another connection", func(t *testing.T) {
		// Valid on its own connection, but sealed under that connection's session key.
		c1, c2 := handshake(t, n.m.Addr(), testSecret), handshake(t, n.m.Addr(), testSecret)
		c2.write(t, TypeMessageAvailable, c1.sealed(t, 1, TypeMessageAvailable, wake))
		expectClosed(t, c2.conn)
		waitFor(t, "mac failure counted", func() bool { return n.m.Stats().MACFailures == 1 })
		n.h.untouched(t)
	})
	n.log.contains(t, "mesh connection refused: frame out of sequence")
}

func TestOversizedFrameIsRefused(t *testing.T) {
	n := target(t, testSecret)
	header := binary.BigEndian.AppendUint32(nil, 64<<20)
	header = append(header, TypeMaintenanceModeSet)

	c := handshake(t, n.m.Addr(), testSecret)
	c.send(t, TypeHeartbeat, `{}`)
	if _, err := c.conn.Write(header); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, c.conn)
	waitFor(t, "oversized frame counted", func() bool { return n.m.Stats().OversizedFrames == 1 })

	// Before the handshake the cap is a few KiB: a HELLO of 8 KiB is already refused.
	conn := rawDial(t, n.m.Addr())
	readChallenge(t, conn)
	if err := WriteFrame(conn, TypeHello, bytes.Repeat([]byte{' '}, 8<<10)); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, conn)
	waitFor(t, "oversized hello counted", func() bool {
		s := n.m.Stats()
		return s.OversizedFrames == 2 && s.HandshakeFailures == 1
	})
	n.log.contains(t, "mesh connection refused: oversized frame")
	n.h.untouched(t)
}

func TestUnknownFrameTypeIsSkipped(t *testing.T) {
	t.Run("authenticated", func(t *testing.T) {
		n := target(t, testSecret)
		c := handshake(t, n.m.Addr(), testSecret)
		c.send(t, 99, `{"from":"a newer broker"}`)
		c.send(t, 5, `{"items":[]}`) // the reference's HOTLIST_DIRTY_BATCH
		c.send(t, TypeMessageAvailable, wake)
		expect(t, "wake after unknown types", n.h.msgs, "q/p")
		c.send(t, TypePopMaintenanceModeSet, `{"enabled":true}`)
		expect(t, "pop maintenance after unknown types", n.h.popMaint, true)
		if s := n.m.Stats(); s.FramesReceived != 4 || s.MACFailures+s.SequenceRejections != 0 {
			t.Fatalf("stats = %+v", s)
		}
	})
	t.Run("unauthenticated", func(t *testing.T) {
		n := target(t, nil)
		c := handshake(t, n.m.Addr(), nil)
		c.write(t, 99, []byte(`{}`))
		c.write(t, TypeMessageAvailable, []byte(wake))
		expect(t, "wake after an unknown type", n.h.msgs, "q/p")
	})
}

// A peer that goes away before its HELLO (a port probe) is not counted as an attack.
func TestProbeIsNotAHandshakeFailure(t *testing.T) {
	n := target(t, testSecret)
	conn := rawDial(t, n.m.Addr())
	readChallenge(t, conn)
	conn.Close()
	n.log.contains(t, "mesh connection closed before its hello")
	if s := n.m.Stats(); s.HandshakeFailures != 0 {
		t.Fatalf("stats = %+v", s)
	}
	// Guard the test itself: an EOF from the handshake must be recognisable.
	if _, err := acceptHandshake(struct {
		io.Reader
		io.Writer
	}{bytes.NewReader(nil), io.Discard}, "x", testSecret); !errors.Is(err, io.EOF) {
		t.Fatalf("err = %v", err)
	}
}

// flood opens conns connections to addr, the i-th from the local address from(i), and holds
// them without ever sending a HELLO: half send nothing, half one byte of a frame header. It
// returns once the node has dealt with every one (sent it a CHALLENGE, that is given it a
// handshake slot, or closed it), with the number given a slot.
func flood(t *testing.T, addr string, conns int, from func(i int) string) int {
	t.Helper()
	admitted := 0
	for i := range conns {
		conn := rawDialFrom(t, from(i), addr)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		var ch challengeMsg
		switch err := readHandshakeFrame(conn, TypeChallenge, &ch); {
		case err == nil:
			admitted++
			if i%2 == 1 {
				conn.Write([]byte{0})
			}
		case !errors.Is(err, io.EOF):
			t.Fatalf("flood connection %d: neither a challenge nor a close: %v", i, err)
		}
	}
	return admitted
}

// peerTarget starts a node, "target", configured with one peer that listens on 127.0.0.2, and
// waits until it is connected to that peer, so that nothing of the peering is logged later.
func peerTarget(t *testing.T) *node {
	t.Helper()
	p := startNode(t, Config{ServerID: "peer", ListenAddr: "127.0.0.2:0", Secret: testSecret})
	n := startNode(t, Config{ServerID: "target", ListenAddr: "127.0.0.1:0", Peers: []string{p.m.Addr()}, Secret: testSecret})
	waitFor(t, "target connected to its peer", func() bool { return n.m.Stats().Peers[0].Connected })
	return n
}

// expectPeerHeard plays the configured peer: from its address 127.0.0.2 it completes the
// handshake and sends a wake, which the node must deliver.
func expectPeerHeard(t *testing.T, n *node) {
	t.Helper()
	c := handshakeOn(t, rawDialFrom(t, "127.0.0.2", n.m.Addr()), testSecret)
	c.send(t, TypeMessageAvailable, wake)
	expect(t, "wake from the configured peer during the flood", n.h.msgs, "q/p")
}

func fromOneHost(int) string { return "127.0.0.1" }

// One host that opens connections and never completes a handshake gets a few handshake
// slots, not all of them.
func TestHandshakeFloodFromOneAddressLeavesPeerIn(t *testing.T) {
	n := peerTarget(t)
	admitted := flood(t, n.m.Addr(), 200, fromOneHost)
	expectPeerHeard(t, n)
	if admitted != maxHandshakesPerAddress {
		t.Fatalf("one address got %d handshake slots, want %d", admitted, maxHandshakesPerAddress)
	}
}

// Strangers on many addresses fill every shared handshake slot; the configured peer's address
// has slots of its own.
func TestHandshakeFloodFromManyAddressesLeavesPeerIn(t *testing.T) {
	n := peerTarget(t)
	admitted := flood(t, n.m.Addr(), 200, func(i int) string {
		return fmt.Sprintf("127.0.1.%d", 1+i/maxHandshakesPerAddress)
	})
	expectPeerHeard(t, n)
	if admitted != maxPendingHandshakes {
		t.Fatalf("strangers got %d handshake slots, want all %d shared ones", admitted, maxPendingHandshakes)
	}
}

// A flood writes a few log lines, however many connections it opens; the counters still count
// every connection.
func TestHandshakeFloodLogIsBounded(t *testing.T) {
	n := target(t, testSecret)
	before := len(n.log.String())
	const conns = 200
	flood(t, n.m.Addr(), conns, fromOneHost)
	// Each flood connection ends as one handshake failure: refused at once, or timed out.
	waitFor(t, "every flood connection counted", func() bool { return n.m.Stats().HandshakeFailures == conns })
	if got := n.metric(`queen_mesh_refused_total{reason="handshake"}`); got != fmt.Sprint(`queen_mesh_refused_total{reason="handshake"} `, conns) {
		t.Fatalf("metric line %q", got)
	}
	var lines []string
	for _, l := range strings.Split(n.log.String()[before:], "\n") {
		if l != "" && !strings.Contains(l, "level=DEBUG") { // what a broker logs by default
			lines = append(lines, l)
		}
	}
	// Two reasons (refused at once, timed out), each logged at most once per warnInterval; the
	// flood and its timeouts are over well within two intervals.
	if len(lines) > 4 {
		t.Fatalf("%d log lines for a flood of %d connections:\n%s", len(lines), conns, strings.Join(lines, "\n"))
	}
}

// The peers' hosts resolve to the addresses whose connections get reserved slots; a host that
// stops resolving keeps the addresses it had.
func TestPeerAddressesAreResolved(t *testing.T) {
	n := target(t, nil)
	hosts := peerHosts([]string{"localhost:6633", "127.0.0.2:6633", "[::ffff:127.0.0.3]:6633", "gone.invalid:6633"})
	hosts["gone.invalid"] = []netip.Addr{netip.MustParseAddr("10.0.0.9")} // its last good answer
	n.m.resolvePeers(hosts)
	for _, want := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.3", "10.0.0.9"} {
		if sl, _ := n.m.admit.admit(netip.MustParseAddr(want)); !sl.peer {
			t.Errorf("%s is not taken for a configured peer's address", want)
		}
	}
	if sl, _ := n.m.admit.admit(netip.MustParseAddr("127.0.0.4")); sl.peer {
		t.Error("127.0.0.4 is taken for a configured peer's address")
	}
}

package mesh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Reconnect backoff, as the reference: 250 ms doubling up to 5 s.
const (
	minBackoff = 250 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// sendQueueSize bounds the frames waiting for one peer's connection.
const sendQueueSize = 1024

// peer is the part of a peer that the Mesh reads without asking its actor (for Stats).
type peer struct {
	addr      string
	pid       *actor.PID
	connected atomic.Bool
	serverID  atomic.Pointer[string] // learned from the HELLO_ACK
}

func (p *peer) id() string {
	if s := p.serverID.Load(); s != nil {
		return *s
	}
	return ""
}

// frame is one frame to send; body is its JSON (sealed by the writer, which owns the sequence).
type frame struct {
	typ  byte
	body []byte
}

// Messages of the peer actor.
type (
	sendFrame struct{ f frame }
	dialed    struct {
		oc     *outConn
		peerID string
	}
	connLost struct {
		oc  *outConn
		err error
	}
)

// outConn is one established outbound connection: its queue lives and dies with it, so frames
// queued for a connection that broke are discarded rather than sent on the next one.
type outConn struct {
	conn  net.Conn
	key   []byte
	queue chan frame
	done  chan struct{}
	once  sync.Once
	lost  func(*outConn, error) // tells the actor; called at most once, by whoever closes first
}

func (oc *outConn) fail(err error) {
	oc.once.Do(func() {
		close(oc.done)
		oc.conn.Close()
		oc.lost(oc, err)
	})
}

// peerActor owns the outbound connection to one peer: it dials (in a goroutine, with backoff),
// hands frames to the connection's bounded queue without ever blocking the sender, and redials
// when the connection breaks. The mesh only sends on connections it dialed.
type peerActor struct {
	m          *Mesh
	p          *peer
	out        *outConn
	cancelDial context.CancelFunc
	log        *slog.Logger
}

func (a *peerActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.log = a.m.log.With("peer", a.p.addr)
		a.dial(ctx, 0)
	case *sendFrame:
		if a.out == nil {
			a.m.stats.dropped.inc()
			return
		}
		select {
		case a.out.queue <- msg.f:
		default:
			a.m.stats.dropped.inc()
		}
	case *dialed:
		a.cancelDial = nil
		a.out = msg.oc
		a.p.serverID.Store(&msg.peerID)
		a.p.connected.Store(true)
		a.m.wg.Add(2)
		go a.m.writeLoop(msg.oc)
		go a.m.watchLoop(msg.oc)
		a.log.Info("mesh peer connected", "server_id", msg.peerID)
	case *connLost:
		if msg.oc != a.out {
			return // a connection this actor already replaced or closed
		}
		a.out = nil
		a.p.connected.Store(false)
		a.log.Warn("mesh peer connection lost; reconnecting", "server_id", a.p.id(), "reason", msg.err)
		a.dial(ctx, minBackoff)
	case *actor.Stopping:
		if a.cancelDial != nil {
			a.cancelDial()
		}
		if oc := a.out; oc != nil {
			a.out = nil
			oc.fail(errors.New("mesh closed"))
		}
		a.p.connected.Store(false)
	}
}

// dial starts a reconnect cycle in a goroutine; its result comes back as a message.
func (a *peerActor) dial(ctx actor.Context, delay time.Duration) {
	dctx, cancel := context.WithCancel(a.m.ctx)
	a.cancelDial = cancel
	self, root := ctx.Self(), a.m.sys.Root
	lost := func(oc *outConn, err error) { root.Send(self, &connLost{oc: oc, err: err}) }
	a.m.wg.Add(1)
	go func() {
		defer a.m.wg.Done()
		defer cancel()
		oc, peerID := a.m.dialLoop(dctx, a.p.addr, a.log, delay, lost)
		if oc != nil {
			root.Send(self, &dialed{oc: oc, peerID: peerID})
		}
	}()
}

// dialLoop dials addr until a handshake succeeds or ctx ends. The host is resolved again on
// every attempt (net.Dialer does it), so a peer that moved is found.
func (m *Mesh) dialLoop(ctx context.Context, addr string, log *slog.Logger, delay time.Duration, lost func(*outConn, error)) (*outConn, string) {
	backoff := minBackoff
	warned := false
	for {
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, ""
			case <-t.C:
			}
		}
		oc, peerID, err := m.dialOnce(ctx, addr, lost)
		if err == nil {
			return oc, peerID
		}
		if ctx.Err() != nil {
			return nil, ""
		}
		if errors.Is(err, ErrHandshake) {
			m.stats.handshakeFailures.inc()
		}
		// One warning per outage, not one per attempt.
		if !warned {
			log.Warn("mesh peer unreachable; retrying", "reason", err)
			warned = true
		} else {
			log.Debug("mesh peer still unreachable", "reason", err)
		}
		delay = backoff
		backoff = min(2*backoff, maxBackoff)
	}
}

// dialOnce dials addr and runs the dialer's handshake.
func (m *Mesh) dialOnce(ctx context.Context, addr string, lost func(*outConn, error)) (*outConn, string, error) {
	d := net.Dialer{Timeout: handshakeTimeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("cannot dial %s: %w", addr, err)
	}
	if !m.track(conn) {
		conn.Close()
		return nil, "", errors.New("mesh closed")
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() }) // Close must not wait for a slow peer
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	s, err := dialHandshake(conn, m.cfg.ServerID, m.cfg.Secret)
	stopped := stop()
	if err == nil && !stopped {
		err = errors.New("mesh closed")
	}
	if err == nil && s.peerID == m.cfg.ServerID {
		err = fmt.Errorf("%w: the peer announces this broker's own server_id %q (self in the peer list, or two brokers with the same QUEEN_SERVER_ID)", ErrHandshake, s.peerID)
	}
	if err != nil {
		conn.Close()
		m.untrack(conn)
		return nil, "", fmt.Errorf("cannot handshake with %s: %w", addr, err)
	}
	conn.SetDeadline(time.Time{})
	oc := &outConn{conn: conn, key: s.key, queue: make(chan frame, sendQueueSize), done: make(chan struct{}), lost: func(oc *outConn, err error) {
		m.untrack(oc.conn)
		lost(oc, err)
	}}
	return oc, s.peerID, nil
}

// writeLoop writes the connection's queued frames, sealing each with the next sequence number,
// and a HEARTBEAT every cfg.Heartbeat so the peer sees this broker alive.
func (m *Mesh) writeLoop(oc *outConn) {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.Heartbeat)
	defer t.Stop()
	var seq uint64
	for {
		var f frame
		select {
		case <-oc.done:
			return
		case f = <-oc.queue:
		case <-t.C:
			f = frame{typ: TypeHeartbeat, body: emptyObject}
		}
		payload := f.body
		if oc.key != nil {
			var err error
			if payload, err = SealEnvelope(oc.key, seq+1, f.typ, f.body); err != nil {
				m.log.Error("mesh frame not sent", "type", f.typ, "err", err)
				continue
			}
		}
		seq++
		oc.conn.SetWriteDeadline(time.Now().Add(m.writeTimeout))
		if err := WriteFrame(oc.conn, f.typ, payload); err != nil {
			oc.fail(err)
			return
		}
		m.stats.sent.inc()
	}
}

// watchLoop notices at once that the peer went away. The listener never writes after its
// HELLO_ACK, so the read returns only when the connection ends (or the peer misbehaves);
// without it a restarted peer would be noticed only when a write fails.
func (m *Mesh) watchLoop(oc *outConn) {
	defer m.wg.Done()
	var b [1]byte
	_, err := oc.conn.Read(b[:])
	if err == nil {
		err = errors.New("peer wrote on a send-only connection")
	}
	oc.fail(err)
}

var emptyObject = []byte("{}")

package mesh

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"
)

// acceptLoop accepts peers' connections: this broker receives only on connections it
// accepted (and sends only on those it dialed), so each pair of brokers has two one-way
// connections.
func (m *Mesh) acceptLoop() {
	defer m.wg.Done()
	for {
		conn, err := m.ln.Accept()
		if err != nil {
			if m.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			m.warnLimited(false, "mesh accept failed", "err", err)
			select {
			case <-m.ctx.Done():
				return
			case <-time.After(100 * time.Millisecond): // do not spin on EMFILE
			}
			continue
		}
		sl, err := m.admit.admit(remoteIP(conn))
		if err != nil {
			m.stats.handshakeFailures.inc()
			m.warnLimited(sl.peer, "mesh connection refused: "+err.Error(), "remote", conn.RemoteAddr().String())
			conn.Close()
			continue
		}
		if !m.track(conn) {
			m.admit.release(sl)
			conn.Close()
			return
		}
		m.wg.Add(1)
		go m.serve(conn, sl)
	}
}

// serve runs the listener's handshake on an accepted connection, then reads, checks and
// dispatches its frames until it ends. The mesh never writes after the handshake on a
// connection it accepted. sl is the connection's handshake slot, given back once the handshake
// ends.
func (m *Mesh) serve(conn net.Conn, sl slot) {
	defer m.wg.Done()
	defer m.untrack(conn)
	defer conn.Close()
	remote := conn.RemoteAddr().String()
	refused := func(serverID string, err error) { m.refused(sl.peer, remote, serverID, err) }

	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	s, err := acceptHandshake(conn, m.cfg.ServerID, m.cfg.Secret)
	m.admit.release(sl)
	if err != nil {
		refused("", err)
		return
	}
	conn.SetDeadline(time.Time{})
	log := m.log.With("remote", remote, "server_id", s.peerID)
	log.Info("mesh peer accepted")
	seen := m.liveness(s.peerID)
	seen.Store(time.Now().UnixNano())

	want := uint64(1)
	for {
		conn.SetReadDeadline(time.Now().Add(m.idleTimeout))
		typ, payload, err := ReadFrame(conn, MaxFrameSize)
		if err != nil {
			if errors.Is(err, ErrEmptyFrame) && s.key != nil {
				// Not even room for an envelope: as unauthentic as a bad MAC.
				err = fmt.Errorf("%w: %w", ErrMalformedEnvelope, err)
			}
			if errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrEmptyFrame) {
				refused(s.peerID, err)
			} else if m.ctx.Err() == nil {
				log.Debug("mesh inbound connection ended", "reason", err)
			}
			return
		}
		body := payload
		if s.key != nil {
			if body, err = OpenEnvelope(s.key, want, typ, payload); err != nil {
				refused(s.peerID, err)
				return
			}
			want++
		}
		m.stats.received.inc()
		seen.Store(time.Now().UnixNano())
		m.dispatch(log, typ, body)
	}
}

// refused counts and logs a connection closed for a protocol or authentication failure;
// fromPeer says whether it came from a configured peer's address.
func (m *Mesh) refused(fromPeer bool, remote, serverID string, err error) {
	if m.ctx.Err() != nil {
		return // closing: the error is ours
	}
	// A connection that goes away before saying anything (a port probe, a peer shutting down)
	// is not an attack.
	if serverID == "" && errors.Is(err, io.EOF) {
		m.log.Debug("mesh connection closed before its hello", "remote", remote)
		return
	}
	reason := "handshake"
	switch {
	case errors.Is(err, ErrFrameTooLarge):
		m.stats.oversized.inc()
		reason = "oversized frame"
	case errors.Is(err, ErrSequence):
		m.stats.sequenceRejections.inc()
		reason = "frame out of sequence"
	case errors.Is(err, ErrBadMAC), errors.Is(err, ErrMalformedEnvelope):
		m.stats.macFailures.inc()
		reason = "frame authentication failed"
	case errors.Is(err, ErrEmptyFrame):
		reason = "malformed frame"
	case errors.Is(err, os.ErrDeadlineExceeded):
		reason = "handshake timed out" // later, a read deadline ends the connection quietly
	}
	if serverID == "" {
		m.stats.handshakeFailures.inc()
	}
	m.warnLimited(fromPeer, "mesh connection refused: "+reason, "remote", remote, "server_id", serverID, "err", err)
}

// Frame bodies.
type (
	availableMsg struct {
		Queue     string `json:"queue"`
		Partition string `json:"partition"`
	}
	batchMsg struct {
		Items []availableMsg `json:"items"`
	}
	queueMsg struct {
		Queue string `json:"queue"`
	}
	flagMsg struct {
		Enabled *bool `json:"enabled"` // a pointer: a body without it must not turn a mode off
	}
)

// dispatch hands one authentic frame to the handler. A body that does not decode is skipped
// with a warning rather than closing the connection: it comes from an authenticated peer,
// most likely of another version.
func (m *Mesh) dispatch(log *slog.Logger, typ byte, body []byte) {
	bad := func(err error) { log.Warn("mesh frame skipped: cannot decode its body", "type", typ, "err", err) }
	switch typ {
	case TypeHeartbeat:
		// liveness only, recorded by the caller
	case TypeMessageAvailable:
		var v availableMsg
		if err := json.Unmarshal(body, &v); err != nil || v.Queue == "" {
			bad(err)
			return
		}
		if m.h != nil {
			m.h.MessageAvailable(v.Queue, v.Partition)
		}
	case TypeMessageAvailableBatch:
		var v batchMsg
		if err := json.Unmarshal(body, &v); err != nil {
			bad(err)
			return
		}
		for _, it := range v.Items {
			if it.Queue != "" && m.h != nil {
				m.h.MessageAvailable(it.Queue, it.Partition)
			}
		}
	case TypeQueueConfigSet, TypeQueueConfigDelete:
		var v queueMsg
		if err := json.Unmarshal(body, &v); err != nil || v.Queue == "" {
			bad(err)
			return
		}
		if m.h != nil {
			m.h.QueueConfigChanged(v.Queue)
		}
	case TypeMaintenanceModeSet, TypePopMaintenanceModeSet:
		var v flagMsg
		if err := json.Unmarshal(body, &v); err != nil || v.Enabled == nil {
			bad(err)
			return
		}
		if m.h == nil {
			return
		}
		if typ == TypeMaintenanceModeSet {
			m.h.MaintenanceChanged(*v.Enabled)
		} else {
			m.h.PopMaintenanceChanged(*v.Enabled)
		}
	default:
		// Rolling upgrades: a newer peer may send types this broker does not know.
		log.Debug("mesh frame of unknown type skipped", "type", typ)
	}
}

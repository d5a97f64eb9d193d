package mesh

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/asynkron/protoactor-go/actor"

	"queen/actors"
)

// Config configures a Mesh.
type Config struct {
	ServerID   string
	ListenAddr string        // host:port to listen on ("" = do not listen)
	Peers      []string      // host:port of the other brokers (self excluded by the caller)
	Secret     []byte        // empty = unauthenticated
	Heartbeat  time.Duration // default 1s
	DeadAfter  time.Duration // default 5s
	Log        *slog.Logger
	Metrics    *metrics.Set // may be nil
	// Listener, when set, is used instead of listening on ListenAddr (tests hand in listeners
	// bound beforehand so that every node's peer list is known at start). Close closes it.
	Listener net.Listener
}

// Handler receives what peers announce. Calls come from the goroutine reading one inbound
// connection, so a slow handler delays that peer's later frames: hand the work off.
type Handler interface {
	MessageAvailable(queue, partition string) // partition "" = any partition of the queue
	QueueConfigChanged(queue string)
	MaintenanceChanged(enabled bool) // push maintenance
	PopMaintenanceChanged(enabled bool)
}

// handshakeTimeout bounds a dial plus handshake; an accepted connection that has not completed
// its handshake by then is closed. The handshake is three small frames between brokers on one
// LAN, done in milliseconds; every second more is a second a stranger's idle connection holds
// a handshake slot.
const handshakeTimeout = 2 * time.Second

// Mesh is this broker's end of the broker mesh.
type Mesh struct {
	cfg          Config
	h            Handler
	log          *slog.Logger
	ln           net.Listener
	sys          *actor.ActorSystem
	peers        []*peer
	ctx          context.Context
	cancel       context.CancelFunc
	wg           sync.WaitGroup
	writeTimeout time.Duration
	idleTimeout  time.Duration
	admit        admission  // handshakes in progress on accepted connections
	warnings     logLimiter // of the warnings about refused and failed connections
	stats        counters

	mu       sync.Mutex
	closed   bool
	conns    map[net.Conn]struct{} // every open connection, closed by Close
	lastSeen map[string]*atomic.Int64

	closeOnce sync.Once
}

// New checks cfg, binds the mesh listener (an error if it cannot be bound) and starts dialing
// the peers, without accepting yet: the broker hands the mesh to the parts that announce
// through it, then lets it accept with the handler built from those parts (Accept).
func New(cfg Config) (*Mesh, error) {
	if !validServerID(cfg.ServerID) {
		return nil, fmt.Errorf("cannot start mesh: server id %q must be 1 to %d bytes", cfg.ServerID, maxServerIDLen)
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = time.Second
	}
	if cfg.DeadAfter <= 0 {
		cfg.DeadAfter = 5 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.Secret = slices.Clone(cfg.Secret)
	log := cfg.Log

	ln := cfg.Listener
	if ln == nil && cfg.ListenAddr != "" {
		var err error
		if ln, err = net.Listen("tcp", cfg.ListenAddr); err != nil {
			return nil, fmt.Errorf("cannot listen on mesh address %s: %w", cfg.ListenAddr, err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	m := &Mesh{
		cfg: cfg, log: log, ln: ln, ctx: ctx, cancel: cancel,
		// A write that cannot proceed this long means the peer stopped reading: reconnect.
		writeTimeout: max(cfg.DeadAfter, time.Second),
		// Heartbeats arrive every Heartbeat; silence this long means a half-open connection.
		idleTimeout: max(3*cfg.DeadAfter, 15*time.Second),
		conns:       map[net.Conn]struct{}{},
		lastSeen:    map[string]*atomic.Int64{},
	}
	m.stats.register(cfg.Metrics)
	m.registerPeers()
	m.sys = actors.NewActorSystem(log)

	if len(cfg.Secret) == 0 {
		log.Warn("mesh is unauthenticated: QUEEN_SYNC_SECRET is empty; firewall the mesh port to the peer brokers")
	} else if len(cfg.Secret) < 16 {
		log.Warn("QUEEN_SYNC_SECRET is shorter than 16 bytes: a captured handshake lets an attacker guess it offline")
	}
	seen := map[string]bool{}
	for _, addr := range cfg.Peers {
		if addr == "" || seen[addr] {
			continue
		}
		seen[addr] = true
		p := &peer{addr: addr}
		p.pid = m.sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &peerActor{m: m, p: p} }))
		m.peers = append(m.peers, p)
	}
	return m, nil
}

// Accept starts accepting the peers' connections and hands what they announce to h. It is
// called once, before anything else may call h.
func (m *Mesh) Accept(h Handler) {
	m.h = h
	if m.ln != nil {
		// The peers' addresses are known before the first connection is accepted.
		hosts := peerHosts(m.cfg.Peers)
		m.resolvePeers(hosts)
		m.wg.Add(2)
		go m.resolveLoop(hosts)
		go m.acceptLoop()
	}
	m.log.Info("mesh started", "server_id", m.cfg.ServerID, "listen", m.Addr(), "peers", len(m.peers),
		"auth", map[bool]string{true: "hmac", false: "off"}[len(m.cfg.Secret) > 0],
		"heartbeat", m.cfg.Heartbeat, "dead_after", m.cfg.DeadAfter)
}

// Addr is the address the mesh listens on ("" when it does not listen).
func (m *Mesh) Addr() string {
	if m.ln == nil {
		return ""
	}
	return m.ln.Addr().String()
}

// Close stops listening, closes every connection and waits for the mesh's goroutines: once it
// returns, the handler is not called again.
func (m *Mesh) Close() {
	m.closeOnce.Do(func() {
		m.cancel()
		if m.ln != nil {
			m.ln.Close()
		}
		m.mu.Lock()
		m.closed = true
		for c := range m.conns {
			c.Close()
		}
		m.mu.Unlock()
		for _, p := range m.peers {
			m.sys.Root.StopFuture(p.pid).Wait()
		}
		m.wg.Wait()
		m.sys.Shutdown()
		m.unregisterPeers()
		m.log.Info("mesh stopped")
	})
}

// track registers an open connection so that Close closes it; false once the mesh is closed.
func (m *Mesh) track(c net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.conns[c] = struct{}{}
	return true
}

func (m *Mesh) untrack(c net.Conn) {
	m.mu.Lock()
	delete(m.conns, c)
	m.mu.Unlock()
}

func (m *Mesh) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// MessageAvailable tells every peer that queue has new messages in partitions: one frame per
// peer, the batch form when there is more than one partition. No partition means any.
func (m *Mesh) MessageAvailable(queue string, partitions []string) {
	if len(partitions) <= 1 {
		var p string
		if len(partitions) == 1 {
			p = partitions[0]
		}
		m.broadcast(TypeMessageAvailable, availableMsg{Queue: queue, Partition: p})
		return
	}
	items := make([]availableMsg, len(partitions))
	for i, p := range partitions {
		items[i] = availableMsg{Queue: queue, Partition: p}
	}
	m.broadcastBatch(items)
}

// broadcastBatch sends items in as few batch frames as fit under the frame cap.
func (m *Mesh) broadcastBatch(items []availableMsg) {
	body, err := json.Marshal(batchMsg{Items: items})
	if err != nil {
		m.log.Error("cannot encode mesh frame", "err", err)
		return
	}
	if len(body) > maxBody && len(items) > 1 {
		m.broadcastBatch(items[:len(items)/2])
		m.broadcastBatch(items[len(items)/2:])
		return
	}
	m.send(TypeMessageAvailableBatch, body)
}

// maxBody leaves room under MaxFrameSize for the envelope around a body.
const maxBody = MaxFrameSize - 1024

// QueueConfigChanged tells every peer to drop what it cached about queue's configuration.
func (m *Mesh) QueueConfigChanged(queue string, deleted bool) {
	typ := TypeQueueConfigSet
	if deleted {
		typ = TypeQueueConfigDelete
	}
	m.broadcast(typ, queueMsg{Queue: queue})
}

// SetMaintenance tells every peer to turn push maintenance on or off.
func (m *Mesh) SetMaintenance(enabled bool) {
	m.broadcast(TypeMaintenanceModeSet, flagMsg{Enabled: &enabled})
}

// SetPopMaintenance tells every peer to turn pop maintenance on or off.
func (m *Mesh) SetPopMaintenance(enabled bool) {
	m.broadcast(TypePopMaintenanceModeSet, flagMsg{Enabled: &enabled})
}

func (m *Mesh) broadcast(typ byte, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		m.log.Error("cannot encode mesh frame", "type", typ, "err", err)
		return
	}
	m.send(typ, body)
}

// send hands one frame to every peer's actor; it never blocks (actor mailboxes are
// non-blocking and the actor drops what its connection's queue cannot take).
func (m *Mesh) send(typ byte, body []byte) {
	if len(body) > maxBody {
		m.log.Error("mesh frame too large; not sent", "type", typ, "bytes", len(body))
		return
	}
	if m.isClosed() {
		return
	}
	for _, p := range m.peers {
		m.sys.Root.Send(p.pid, &sendFrame{f: frame{typ: typ, body: body}})
	}
}

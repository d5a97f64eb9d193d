package mesh

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// PeerStats describes one peer. Addr is empty for a broker that connects to this one but is not
// in its peer list. Connected is about the outbound connection; LastSeen and Alive about frames
// received from the peer's server id.
type PeerStats struct {
	Addr, ServerID string
	Connected      bool
	LastSeen       time.Time
	Alive          bool
}

// Stats is a snapshot of the mesh, for the shared-state stats endpoint.
type Stats struct {
	ServerID      string
	Authenticated bool
	Peers         []PeerStats
	FramesSent, FramesReceived, FramesDropped, HandshakeFailures,
	MACFailures, SequenceRejections, OversizedFrames int64
}

// counter counts for Stats and, when a metrics set was given, for /metrics.
type counter struct {
	n atomic.Int64
	c *metrics.Counter
}

func (c *counter) inc() {
	c.n.Add(1)
	if c.c != nil {
		c.c.Inc()
	}
}

type counters struct {
	sent, received, dropped, handshakeFailures, macFailures, sequenceRejections, oversized counter
}

func (c *counters) register(set *metrics.Set) {
	if set == nil {
		return
	}
	for name, ctr := range map[string]*counter{
		// The reference broker's family for the frames a broker exchanges with its peers.
		`queen_transport_messages_total{dir="sent"}`:     &c.sent,
		`queen_transport_messages_total{dir="received"}`: &c.received,
		`queen_transport_messages_total{dir="dropped"}`:  &c.dropped,
		// Connections refused at the handshake, and frames refused on an open session.
		`queen_mesh_refused_total{reason="handshake"}`: &c.handshakeFailures,
		`queen_mesh_refused_total{reason="mac"}`:       &c.macFailures,
		`queen_mesh_refused_total{reason="sequence"}`:  &c.sequenceRejections,
		`queen_mesh_refused_total{reason="oversized"}`: &c.oversized,
	} {
		// GetOrCreate, not New: a mesh restarted in the same process shares the series.
		ctr.c = set.GetOrCreateCounter(name)
	}
}

// peerGauges are the names of the peer liveness gauges (the reference broker's family).
var peerGauges = [2]string{`queen_servers{state="alive"}`, `queen_servers{state="dead"}`}

// registerPeers exposes how many peers are alive and dead (by the frames received from them),
// read from Stats at each scrape; unregisterPeers takes them away when the mesh closes, so a
// mesh started later in the same set reports its own peers.
func (m *Mesh) registerPeers() {
	if m.cfg.Metrics == nil {
		return
	}
	for i, name := range peerGauges {
		alive := i == 0
		m.cfg.Metrics.GetOrCreateGauge(name, func() float64 {
			n := 0
			for _, p := range m.Stats().Peers {
				if p.Alive == alive {
					n++
				}
			}
			return float64(n)
		})
	}
}

func (m *Mesh) unregisterPeers() {
	if m.cfg.Metrics == nil {
		return
	}
	for _, name := range peerGauges {
		m.cfg.Metrics.UnregisterMetric(name)
	}
}

// Stats returns a snapshot: configured peers first (in configuration order), then brokers that
// connect to this one without being configured, by server id.
func (m *Mesh) Stats() Stats {
	now := time.Now()
	s := Stats{
		ServerID:           m.cfg.ServerID,
		Authenticated:      len(m.cfg.Secret) > 0,
		FramesSent:         m.stats.sent.n.Load(),
		FramesReceived:     m.stats.received.n.Load(),
		FramesDropped:      m.stats.dropped.n.Load(),
		HandshakeFailures:  m.stats.handshakeFailures.n.Load(),
		MACFailures:        m.stats.macFailures.n.Load(),
		SequenceRejections: m.stats.sequenceRejections.n.Load(),
		OversizedFrames:    m.stats.oversized.n.Load(),
	}
	m.mu.Lock()
	seen := make(map[string]int64, len(m.lastSeen))
	for id, t := range m.lastSeen {
		seen[id] = t.Load()
	}
	m.mu.Unlock()
	liveness := func(ps *PeerStats) {
		if ns, ok := seen[ps.ServerID]; ok {
			ps.LastSeen = time.Unix(0, ns)
			ps.Alive = now.Sub(ps.LastSeen) <= m.cfg.DeadAfter
		}
	}
	known := map[string]bool{}
	for _, p := range m.peers {
		ps := PeerStats{Addr: p.addr, ServerID: p.id(), Connected: p.connected.Load()}
		if ps.ServerID != "" {
			known[ps.ServerID] = true
			liveness(&ps)
		}
		s.Peers = append(s.Peers, ps)
	}
	var others []string
	for id := range seen {
		if !known[id] {
			others = append(others, id)
		}
	}
	slices.Sort(others)
	for _, id := range others {
		ps := PeerStats{ServerID: id}
		liveness(&ps)
		s.Peers = append(s.Peers, ps)
	}
	return s
}

// liveness returns the last-seen clock of a server id, creating it.
func (m *Mesh) liveness(serverID string) *atomic.Int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.lastSeen[serverID]
	if t == nil {
		if len(m.lastSeen) >= maxTrackedServers {
			// Without a secret anyone can announce any id: forget the longest-silent one
			// rather than grow without bound.
			var oldest string
			for id, seen := range m.lastSeen {
				if oldest == "" || seen.Load() < m.lastSeen[oldest].Load() {
					oldest = id
				}
			}
			delete(m.lastSeen, oldest)
		}
		t = new(atomic.Int64)
		m.lastSeen[serverID] = t
	}
	return t
}

// maxTrackedServers bounds the server ids whose liveness is remembered (three brokers is the
// designed ceiling; this is far above it).
const maxTrackedServers = 256

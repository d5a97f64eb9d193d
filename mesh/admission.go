package mesh

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Handshake admission. Until its handshake completes an accepted connection could be anyone's,
// yet it holds a goroutine and a slot until it authenticates or handshakeTimeout ends it. These
// limits keep a flood of such connections (idle, or dripping garbage) from locking the
// configured peers out of the mesh port.
const (
	// maxPendingHandshakes bounds the handshakes in progress from addresses that are not a
	// configured peer's, so that a flood of idle connections cannot pile up goroutines.
	maxPendingHandshakes = 64
	// maxHandshakesPerAddress bounds the handshakes in progress from one IP address. A broker
	// dials each peer over one connection at a time; the rest covers a redial while its last
	// attempt is still on the clock. One host thus holds at most this many slots.
	maxHandshakesPerAddress = 4
	// peerResolveInterval is how often the configured peers' host names are looked up again,
	// so that a peer back on a new address (a rescheduled pod) gets its reserved slots back.
	peerResolveInterval = 30 * time.Second
	// peerResolveTimeout bounds one round of look-ups; the first round runs in Start and must
	// not hold the boot up for long.
	peerResolveTimeout = 2 * time.Second
)

var (
	errTooManyFromAddress = errors.New("too many handshakes from one address")
	errTooManyHandshakes  = errors.New("too many handshakes in progress")
)

// admission counts the handshakes in progress. A connection from a configured peer's address is
// limited per address only and never takes one of the maxPendingHandshakes shared slots: those
// are the strangers', and strangers can exhaust nothing else.
type admission struct {
	mu     sync.Mutex
	byAddr map[netip.Addr]int
	shared int
	peers  map[netip.Addr]bool
}

// slot is one connection's place in the admission; peer says whether it came from a configured
// peer's address.
type slot struct {
	addr netip.Addr
	peer bool
}

// admit takes a slot for a connection from addr, or says why there is none.
func (a *admission) admit(addr netip.Addr) (slot, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := slot{addr: addr, peer: a.peers[addr]}
	switch {
	case a.byAddr[addr] >= maxHandshakesPerAddress:
		return s, errTooManyFromAddress
	case !s.peer && a.shared >= maxPendingHandshakes:
		return s, errTooManyHandshakes
	}
	if a.byAddr == nil {
		a.byAddr = map[netip.Addr]int{}
	}
	a.byAddr[s.addr]++
	if !s.peer {
		a.shared++
	}
	return s, nil
}

// release gives back a slot that admit returned without error.
func (a *admission) release(s slot) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byAddr[s.addr]--; a.byAddr[s.addr] == 0 {
		delete(a.byAddr, s.addr) // the map holds only the addresses with a handshake in progress
	}
	if !s.peer {
		a.shared--
	}
}

func (a *admission) setPeers(addrs map[netip.Addr]bool) {
	a.mu.Lock()
	a.peers = addrs
	a.mu.Unlock()
}

// ipOf returns the form of an IP address the admission compares: IPv4 never IPv6-mapped, no zone.
func ipOf(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

// remoteIP is the IP address conn comes from; the zero Addr for a listener that is not TCP/IP,
// whose connections then all share one address's slots.
func remoteIP(conn net.Conn) netip.Addr {
	if ta, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
		return ipOf(ta.AddrPort().Addr())
	}
	return netip.Addr{}
}

// peerHosts returns the hosts of the configured peers (host:port), each once, with the
// addresses they resolve to still unknown.
func peerHosts(peers []string) map[string][]netip.Addr {
	hosts := map[string][]netip.Addr{}
	for _, p := range peers {
		host, _, err := net.SplitHostPort(p)
		if err != nil {
			host = p // config hands in host:port; a bare host still names the peer
		}
		if host != "" {
			hosts[host] = nil
		}
	}
	return hosts
}

// resolvePeers looks the peers' hosts up and hands the admission every address found. A host
// that does not resolve this time keeps the addresses it had: a DNS hiccup must not cost a peer
// its reserved slots.
func (m *Mesh) resolvePeers(hosts map[string][]netip.Addr) {
	ctx, cancel := context.WithTimeout(m.ctx, peerResolveTimeout)
	defer cancel()
	set := map[netip.Addr]bool{}
	for host := range hosts {
		if a, err := netip.ParseAddr(host); err == nil {
			hosts[host] = []netip.Addr{a}
		} else if addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host); err == nil {
			hosts[host] = addrs
		} else {
			m.log.Debug("cannot resolve mesh peer; its connections share the strangers' handshake slots until it does",
				"host", host, "err", err)
		}
		for _, a := range hosts[host] {
			set[ipOf(a)] = true
		}
	}
	m.admit.setPeers(set)
}

// resolveLoop refreshes the peers' addresses every peerResolveInterval until the mesh closes.
func (m *Mesh) resolveLoop(hosts map[string][]netip.Addr) {
	defer m.wg.Done()
	t := time.NewTicker(peerResolveInterval)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
			m.resolvePeers(hosts)
		}
	}
}

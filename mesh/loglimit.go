package mesh

import (
	"sync"
	"time"
)

// warnInterval is the least time between two warnings of one kind about refused or failed
// connections. A flood of refused connections otherwise writes a line each (898k lines,
// 141 MB in 40 s); the counters stay exact, the log gets a sample line and a count.
const warnInterval = 10 * time.Second

// limitKey is a kind of warning: its message, and whether the connection came from a
// configured peer's address, so that a flood from strangers cannot hide a peer's own trouble
// (a wrong secret, say).
type limitKey struct {
	msg  string
	peer bool
}

type limitState struct {
	last       time.Time
	suppressed int
}

// logLimiter lets through one warning per kind per warnInterval and counts the others. Kinds
// are a fixed set of messages, so its map stays small.
type logLimiter struct {
	mu    sync.Mutex
	kinds map[limitKey]*limitState
}

// allow says whether a warning of kind k may be written at now and, if so, how many of that
// kind were suppressed since the last one written.
func (l *logLimiter) allow(k limitKey, now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.kinds[k]
	if s == nil {
		if l.kinds == nil {
			l.kinds = map[limitKey]*limitState{}
		}
		l.kinds[k] = &limitState{last: now}
		return true, 0
	}
	if now.Sub(s.last) < warnInterval {
		s.suppressed++
		return false, 0
	}
	suppressed, s.suppressed, s.last = s.suppressed, 0, now
	return true, suppressed
}

// warnLimited writes a warning about a refused or failed connection through the limiter; a
// line written after others were suppressed carries their number as "suppressed".
func (m *Mesh) warnLimited(fromPeer bool, msg string, args ...any) {
	ok, suppressed := m.warnings.allow(limitKey{msg: msg, peer: fromPeer}, time.Now())
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	m.log.Warn(msg, args...)
}

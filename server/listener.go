package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"queen/config"
)

// Accept retry schedule: a failed accept is retried after acceptRetryFirst, doubling up to
// acceptRetryMax; a warning is logged at most once per acceptLogEvery, with the count.
const (
	acceptRetryFirst = 5 * time.Millisecond
	acceptRetryMax   = time.Second
	acceptLogEvery   = 10 * time.Second
)

// retryListener keeps a listener accepting through the errors a loaded process recovers from.
// fasthttp treats every accept error but a timeout as the end of its listener, so without it a
// descriptor shortage (EMFILE) would stop the broker. Any other error is returned: the listener
// has really failed.
type retryListener struct {
	net.Listener
	name string // which listener, in the log
	log  *slog.Logger

	closed    chan struct{} // interrupts a backoff, so Close does not wait for it
	closeOnce sync.Once

	// Accept runs on one goroutine (the server's accept loop), the only user of these.
	delay    time.Duration // current backoff, 0 after a success
	failures int           // failed accepts not yet logged
	loggedAt time.Time
}

func newRetryListener(ln net.Listener, name string, log *slog.Logger) *retryListener {
	return &retryListener{Listener: ln, name: name, log: log, closed: make(chan struct{})}
}

func (l *retryListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			l.delay = 0
			return c, nil
		}
		if !temporaryAcceptError(err) {
			return nil, err
		}
		l.delay = min(max(2*l.delay, acceptRetryFirst), acceptRetryMax)
		l.failures++
		if now := time.Now(); now.Sub(l.loggedAt) >= acceptLogEvery {
			l.log.Warn("cannot accept connections, retrying", "listener", l.name, "err", err,
				"failures", l.failures, "retry_in", l.delay)
			l.failures, l.loggedAt = 0, now
		}
		t := time.NewTimer(l.delay)
		select {
		case <-t.C:
		case <-l.closed: // the next Accept returns net.ErrClosed
			t.Stop()
		}
	}
}

func (l *retryListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// temporaryAcceptError reports an accept error that goes away by itself: a descriptor or memory
// shortage, or a connection that failed between the handshake and accept (accept(2) asks to
// retry on those).
func temporaryAcceptError(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, errno := range []syscall.Errno{
		syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.EPROTO, syscall.ENETDOWN, syscall.ENETUNREACH, syscall.EHOSTUNREACH,
	} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

// fixedDescriptorReserve is what the broker keeps, beyond the PostgreSQL pool and the mesh, for
// the descriptors it opens besides HTTP connections: standard streams, the poller, the
// listeners (HTTP, mesh, metrics, pprof), spool segments, the pipes of the local PostgreSQL, JWKS
// fetches, an operator's metrics and pprof connections.
const fixedDescriptorReserve = 64

// connectionCap is how many HTTP connections the broker serves at once (see fitConnections),
// logged. The soft descriptor limit is the one that counts; the Go runtime has already raised it
// to the hard one.
func connectionCap(cfg config.Config, log *slog.Logger) (int, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("cannot read the descriptor limit (RLIMIT_NOFILE): %w", err)
	}
	n, reserve, err := fitConnections(cfg, lim.Cur)
	if err != nil {
		return 0, err
	}
	if n < cfg.MaxConnections {
		log.Warn("QUEEN_MAX_CONNECTIONS lowered to fit the descriptor limit; raise the limit (ulimit -n) to serve more connections",
			"max_connections", n, "configured", cfg.MaxConnections, "descriptor_limit", lim.Cur, "descriptor_reserve", reserve)
	} else {
		log.Info("http connection cap", "max_connections", n, "descriptor_limit", lim.Cur, "descriptor_reserve", reserve)
	}
	return n, nil
}

// fitConnections lowers QUEEN_MAX_CONNECTIONS so that the HTTP connections leave the reserve
// free under the descriptor limit nofile, and returns it with the reserve. A limit that leaves
// nothing is an error.
func fitConnections(cfg config.Config, nofile uint64) (n, reserve int, err error) {
	// The pool's connections, and one connection each way per mesh peer.
	reserve = cfg.PG.PoolSize + 2*len(cfg.MeshPeers) + fixedDescriptorReserve
	if nofile >= uint64(cfg.MaxConnections+reserve) {
		return cfg.MaxConnections, reserve, nil
	}
	if n = int(nofile) - reserve; n < 1 {
		return 0, reserve, fmt.Errorf("the descriptor limit (ulimit -n) is %d, and the broker keeps %d of them for PostgreSQL (DB_POOL_SIZE=%d), the mesh and its files: none is left for HTTP connections; raise the limit",
			nofile, reserve, cfg.PG.PoolSize)
	}
	return n, reserve, nil
}

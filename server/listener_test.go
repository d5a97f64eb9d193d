package server

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"queen/config"
	"queen/pg"
	"queen/testkit"
)

// failingListener is a real loopback listener whose first Accepts fail with errs, in order, as
// the kernel reports them (a *net.OpError around the errno).
type failingListener struct {
	net.Listener
	errs []error
}

func (l *failingListener) Accept() (net.Conn, error) {
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: err}
	}
	return l.Listener.Accept()
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

func loopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// Descriptor and memory shortages, aborted handshakes and timeouts are retried: Accept returns
// the next real connection, and the first failure is logged naming the listener and the error.
func TestListenerRetriesTemporaryAcceptErrors(t *testing.T) {
	t.Parallel()
	var logs testkit.LogBuffer // a log the test reads while the listener writes
	ln := &failingListener{Listener: loopback(t), errs: []error{
		os.NewSyscallError("accept4", syscall.EMFILE), os.NewSyscallError("accept4", syscall.ENFILE),
		os.NewSyscallError("accept4", syscall.ECONNABORTED), os.NewSyscallError("accept4", syscall.ENOBUFS),
		os.NewSyscallError("accept4", syscall.ENOMEM), timeoutError{},
	}}
	rl := newRetryListener(ln, "HTTP", slog.New(slog.NewTextHandler(&logs, nil)))

	d, err := net.Dial("tcp", ln.Addr().String()) // waits in the backlog for the Accept
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := rl.Accept()
	if err != nil {
		t.Fatalf("Accept: %v, want the connection after the temporary errors", err)
	}
	defer c.Close()
	if c.RemoteAddr().String() != d.LocalAddr().String() {
		t.Fatalf("accepted a connection from %v, dialed from %v", c.RemoteAddr(), d.LocalAddr())
	}
	if len(ln.errs) != 0 {
		t.Fatalf("%d scripted errors left unconsumed", len(ln.errs))
	}
	first, _, _ := strings.Cut(logs.String(), "\n")
	if !strings.Contains(first, "level=WARN") || !strings.Contains(first, "listener=HTTP") ||
		!strings.Contains(first, "too many open files") || !strings.Contains(first, "failures=1 ") {
		t.Fatalf("first log line %q, want a warning naming the listener, the error and the count", first)
	}
}

// Any other accept error means the listener is gone: it is returned at once.
func TestListenerReturnsPermanentAcceptErrors(t *testing.T) {
	t.Parallel()
	ln := &failingListener{Listener: loopback(t), errs: []error{os.NewSyscallError("accept4", syscall.EINVAL)}}
	rl := newRetryListener(ln, "HTTP", slog.New(slog.DiscardHandler))
	if _, err := rl.Accept(); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Accept: %v, want EINVAL", err)
	}
	ln.Close()
	if _, err := rl.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
	}
}

// QUEEN_MAX_CONNECTIONS is lowered to what the descriptor limit leaves once the pool, the mesh
// and the fixed reserve are set aside; a limit that leaves nothing stops the boot.
func TestListenConnectionCapFitsDescriptorLimit(t *testing.T) {
	t.Parallel()
	cfg := config.Config{MaxConnections: 10000, PG: pg.Settings{PoolSize: 20}}
	peers := config.Config{MaxConnections: 10000, PG: pg.Settings{PoolSize: 20}, MeshPeers: []string{"a:6633", "b:6633"}}
	for _, tc := range []struct {
		name   string
		cfg    config.Config
		nofile uint64
		want   int
	}{
		{"limit above the setting", cfg, 1 << 20, 10000},
		{"unlimited", cfg, ^uint64(0), 10000},
		{"exactly enough", cfg, 10000 + 20 + fixedDescriptorReserve, 10000},
		{"ulimit -n 1024", cfg, 1024, 1024 - 20 - fixedDescriptorReserve},
		{"ulimit -n 1024 with two peers", peers, 1024, 1024 - 20 - 4 - fixedDescriptorReserve},
		{"setting below the limit", config.Config{MaxConnections: 50, PG: pg.Settings{PoolSize: 20}}, 1024, 50},
	} {
		n, _, err := fitConnections(tc.cfg, tc.nofile)
		if err != nil || n != tc.want {
			t.Errorf("%s: %d, %v; want %d", tc.name, n, err, tc.want)
		}
	}
	_, _, err := fitConnections(cfg, 20+fixedDescriptorReserve)
	if err == nil || !strings.Contains(err.Error(), "DB_POOL_SIZE") || !strings.Contains(err.Error(), "ulimit -n") {
		t.Fatalf("a limit that leaves no connection: %v, want an error naming DB_POOL_SIZE and ulimit -n", err)
	}
}

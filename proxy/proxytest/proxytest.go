// Package proxytest starts a real queen-proxy for the tests of other packages (the dashboard's
// sign-in): a control-plane database of its own, the proxy on loopback with its loops running,
// stopped with the test.
package proxytest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"queen/config"
	"queen/pg/pgtest"
	"queen/proxy"
	"queen/proxy/pxdb"
	"queen/testkit"
)

// Proxy is a running proxy and its control plane.
type Proxy struct {
	*proxy.Proxy
	Store *pxdb.Store
	Base  string // http://127.0.0.1:port
}

// Start starts a plaintext proxy on a fresh control-plane database (call pgtest.Main from
// TestMain), with the configuration the environment would give by default changed by edit.
// It returns once the key cache follows the control plane's changes.
func Start(t testing.TB, edit func(*config.Proxy)) *Proxy {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("QUEEN_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	store, err := pxdb.OpenConn(context.Background(), pgtest.NewDatabase(t), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close) // after the proxy's own cleanup: cleanups run last first
	cfg, err := config.LoadProxy(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&cfg)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.Start(context.Background(), cfg, store, log, ln)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("proxy shutdown: %v", err)
		}
	})
	testkit.WaitFor(t, 30*time.Second, "the proxy to follow the control plane's changes", p.ChangeFeedUp)
	return &Proxy{Proxy: p, Store: store, Base: "http://" + ln.Addr().String()}
}

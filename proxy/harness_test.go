package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"queen/auth"
	"queen/config"
	"queen/pg/pgtest"
	"queen/proxy/pxdb"
	"queen/server/servertest"
	"queen/testkit"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The tests start real parts: brokers on their own PostgreSQL databases, the control-plane
// database, and the proxy on loopback with a certificate chain made for the test. Clients
// reach the proxy by host name (cell-a.proxy.test, ...) through a dialer that sends every
// name to the proxy's address, as DNS would.

// testCA is a certificate authority made for one test, and the proxy's certificate files.
type testCA struct {
	*testkit.CA
	certFile string
	keyFile  string
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	dir := t.TempDir()
	ca := &testCA{CA: testkit.NewCA(t), certFile: filepath.Join(dir, "proxy.crt"), keyFile: filepath.Join(dir, "proxy.key")}
	ca.issue(t, 2)
	return ca
}

// issue writes a new server certificate for *.proxy.test and 127.0.0.1 with serial into the
// proxy's files.
func (ca *testCA) issue(t *testing.T, serial int64) {
	t.Helper()
	cert, key := ca.Issue(t, serial, []string{"proxy.test", "*.proxy.test"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	must(t, os.WriteFile(ca.certFile, cert, 0o600))
	must(t, os.WriteFile(ca.keyFile, key, 0o600))
}

// testProxy is a running proxy with its control plane.
type testProxy struct {
	t     *testing.T
	p     *Proxy
	store *pxdb.Store
	addr  string
	ca    *testCA // nil for plaintext
	log   *testkit.LogBuffer
	conns *deathListener
}

// deathListener remembers the connections it accepted, so that a test can end them all at once,
// as a process that dies does: a graceful shutdown leaves a request in flight to finish, and
// the client would go on using that connection.
type deathListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *deathListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

// kill stops the proxy without grace: the listener closes and every connection it accepted is
// cut.
func (tp *testProxy) kill() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = tp.p.Shutdown(ctx) // context.Canceled: requests in flight are not waited for
	tp.conns.mu.Lock()
	defer tp.conns.mu.Unlock()
	for _, c := range tp.conns.conns {
		c.Close()
	}
}

// startProxy starts a proxy with cfg changed by edit, TLS from ca when not nil.
func startProxy(t *testing.T, store *pxdb.Store, ca *testCA, edit func(*config.Proxy)) *testProxy {
	t.Helper()
	cfg, err := config.LoadProxy(func(string) string { return "" })
	must(t, err)
	cfg.JWTSecret = "proxy-session-secret-0123456789abcdef"
	if ca != nil {
		cfg.TLSCert, cfg.TLSKey = ca.certFile, ca.keyFile
	}
	if edit != nil {
		edit(&cfg)
	}
	buf := &testkit.LogBuffer{}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(buf, testLogSink()), nil))
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	ln := &deathListener{Listener: raw}
	p, err := Start(context.Background(), cfg, store, log, ln)
	must(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("proxy shutdown: %v", err)
		}
	})
	tp := &testProxy{t: t, p: p, store: store, addr: ln.Addr().String(), ca: ca, log: buf, conns: ln}
	// The change feed (LISTEN) is up before a test revokes anything.
	testkit.WaitFor(t, 30*time.Second, "the proxy to listen for control-plane changes", p.ChangeFeedUp)
	return tp
}

func testLogSink() io.Writer {
	if os.Getenv("QUEEN_TEST_LOG") != "" {
		return os.Stderr
	}
	return io.Discard
}

// client is an HTTP client of the proxy for host (a cell's host name), trusting the test CA.
func (tp *testProxy) client() *http.Client {
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, tp.addr)
	}
	tr := &http.Transport{DialContext: dial, ForceAttemptHTTP2: false}
	if tp.ca != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: tp.ca.Pool}
	}
	return &http.Client{Transport: tr, Timeout: 2 * time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (tp *testProxy) url(host, path string) string {
	scheme := "http"
	if tp.ca != nil {
		scheme = "https"
	}
	return scheme + "://" + host + path
}

// do sends a request to host through the proxy with the given headers (pairs) and returns the
// status, headers and body.
func (tp *testProxy) do(host, method, path string, body any, headers ...string) (int, http.Header, []byte) {
	tp.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		must(tp.t, err)
		r = strings.NewReader(string(raw))
	}
	req, err := http.NewRequest(method, tp.url(host, path), r)
	must(tp.t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := tp.client().Do(req)
	must(tp.t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	must(tp.t, err)
	return resp.StatusCode, resp.Header, out
}

// raw writes request bytes as they are (paths no client library would send) on a new
// connection to the proxy and returns the status and body of the answer.
func (tp *testProxy) raw(host, request string) (int, string) {
	tp.t.Helper()
	var conn net.Conn
	var err error
	if tp.ca != nil {
		conn, err = tls.Dial("tcp", tp.addr, &tls.Config{RootCAs: tp.ca.Pool, ServerName: host})
	} else {
		conn, err = net.Dial("tcp", tp.addr)
	}
	must(tp.t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, request)
	must(tp.t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	must(tp.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must(tp.t, err)
	return resp.StatusCode, string(b)
}

// codeOf is the "code" of a proxy answer.
func codeOf(body []byte) string {
	var a answer
	_ = json.Unmarshal(body, &a)
	return a.Code
}

const brokerSecret = "broker-jwt-secret-for-proxy-tests-0123456789"

// startCellBroker starts a broker with JWT on (HS256, brokerSecret) and returns it with an
// admin token for it, the credential a cell presents.
func startCellBroker(t *testing.T, opts ...servertest.Option) (*servertest.Client, string) {
	t.Helper()
	opts = append([]servertest.Option{func(c *config.Config) {
		c.JWT = auth.Defaults()
		c.JWT.Secret = brokerSecret
	}}, opts...)
	c := servertest.Start(t, pgtest.NewDatabase(t), opts...)
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "queen-proxy", "role": "admin",
		"exp": time.Now().Add(24 * time.Hour).Unix()}).SignedString([]byte(brokerSecret))
	must(t, err)
	return c, tok
}

// mainCell starts a broker and a control plane with one cell, main, in front of it.
func mainCell(t *testing.T) (*servertest.Client, string, *pxdb.Store) {
	t.Helper()
	broker, token := startCellBroker(t)
	store := openStore(t)
	addCell(t, store, pxdb.Cell{Name: "main", Upstream: broker.Base, BrokerToken: token})
	return broker, token, store
}

func openStore(t *testing.T) *pxdb.Store {
	t.Helper()
	s, _ := openStoreAt(t)
	return s
}

// openStoreAt opens a control-plane store on a new database and returns its connection
// string too, for a second process's connection.
func openStoreAt(t *testing.T) (*pxdb.Store, string) {
	t.Helper()
	cs := pgtest.NewDatabase(t)
	s, err := pxdb.OpenConn(context.Background(), cs, slog.New(slog.NewTextHandler(testLogSink(), nil)))
	must(t, err)
	t.Cleanup(s.Close)
	return s, cs
}

var cli = pxdb.Actor{Who: "cli:test", Credential: "cli"}

func addCell(t *testing.T, s *pxdb.Store, c pxdb.Cell) {
	t.Helper()
	must(t, s.AddCell(context.Background(), c, cli))
}

func newKey(t *testing.T, s *pxdb.Store, cell string, classes ...string) (pxdb.Key, string) {
	t.Helper()
	k, secret, err := s.CreateKey(context.Background(), cell, classes, time.Now().Add(time.Hour), cli)
	must(t, err)
	return k, secret
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

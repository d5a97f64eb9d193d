// Package servertest starts real brokers in-process for integration tests: real PostgreSQL
// (a pgtest database), real HTTP over loopback.
package servertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"queen/config"
	"queen/server"
)

// Client talks HTTP to one broker.
type Client struct {
	t      testing.TB
	Base   string
	Broker *server.Broker
	http   *http.Client
	header http.Header // sent on every request (WithHeader)
}

// WithHeader returns a client for the same broker that also sends key: value on every request
// (an Authorization bearer token, say); c itself is unchanged.
func (c *Client) WithHeader(key, value string) *Client {
	cp := *c
	cp.header = c.header.Clone()
	if cp.header == nil {
		cp.header = http.Header{}
	}
	cp.header.Set(key, value)
	return &cp
}

// Option changes the configuration of a test broker. It names config.Config fields, so a
// misspelled setting does not compile; the environment loader itself is exercised end to end
// by the tests that boot brokers from variables (the mesh tests, cmd/queen).
type Option func(*config.Config)

// Start boots a broker on 127.0.0.1 against the database connString, with the configuration
// the environment would give by default changed by opts. The broker stops when the test ends.
func Start(t testing.TB, connString string, opts ...Option) *Client {
	t.Helper()
	level := slog.LevelWarn
	if os.Getenv("QUEEN_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	return StartLogged(t, connString, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})), opts...)
}

// StartLogged is Start with the broker's logger given, for tests that read what it logs.
func StartLogged(t testing.TB, connString string, log *slog.Logger, opts ...Option) *Client {
	t.Helper()
	cfg, err := config.Load(func(string) string { return "" })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	// Each broker gets a spool of its own unless the test shares one on purpose (restarts).
	cfg.SpoolDir = t.TempDir()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.JWT.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := server.Start(context.Background(), cfg, log, server.Options{ConnString: connString, Listener: ln})
	if err != nil {
		t.Fatalf("broker start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := b.Shutdown(ctx); err != nil {
			t.Errorf("broker shutdown: %v", err)
		}
	})
	return &Client{t: t, Base: "http://" + b.Addr(), Broker: b, http: &http.Client{Timeout: 2 * time.Minute}}
}

// Do sends a request and returns the status and body. body may be nil, a string or []byte
// (sent as is) or any other value (sent as JSON).
func (c *Client) Do(method, path string, body any) (int, []byte) {
	c.t.Helper()
	status, _, out := c.DoHeader(method, path, body)
	return status, out
}

// DoHeader is Do that also returns the answer's headers.
func (c *Client) DoHeader(method, path string, body any) (int, http.Header, []byte) {
	c.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = bytes.NewBufferString(b)
	case []byte:
		r = bytes.NewBuffer(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			c.t.Fatal(err)
		}
		r = bytes.NewBuffer(j)
	}
	req, err := http.NewRequest(method, c.Base+path, r)
	if err != nil {
		c.t.Fatal(err)
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, out
}

// Raw writes request to the broker as it is, bytes no HTTP client would send included, and
// returns the status and body of the answer.
func (c *Client) Raw(request string) (int, []byte) {
	c.t.Helper()
	conn, err := net.Dial("tcp", c.Broker.Addr())
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	if _, err := io.WriteString(conn, request); err != nil {
		c.t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		c.t.Fatalf("raw request: %v", err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("raw request: reading body: %v", err)
	}
	return resp.StatusCode, out
}

// JSON sends a request, checks the status and decodes the JSON answer into out (when not nil).
func (c *Client) JSON(method, path string, body any, wantStatus int, out any) {
	c.t.Helper()
	status, raw := c.Do(method, path, body)
	if status != wantStatus {
		c.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, status, wantStatus, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			c.t.Fatalf("%s %s: cannot decode %s: %v", method, path, raw, err)
		}
	}
}

package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// client talks HTTP/1.1 keep-alive to one broker, or to the TLS front door before it. fasthttp
// rather than net/http because the load generator shares two cores with the broker and
// PostgreSQL: every cycle it spends is a cycle the broker does not get.
type client struct {
	hc   *fasthttp.HostClient
	base string // scheme://host:port, the prefix of the request URIs
	auth string // the Authorization header of every request; "" for none
}

// newClient reaches base, http:// or https://. For https, roots are the CAs to trust (nil: the
// system's) and the certificate must name the URL's host. A non-empty token is sent as a bearer
// token on every request.
func newClient(base, token string, roots *x509.CertPool) (*client, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("cannot parse broker URL %q: %w", base, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("broker URL %q must be http://host:port or https://host:port", base)
	}
	host := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	c := &client{base: u.Scheme + "://" + host, hc: &fasthttp.HostClient{
		Addr:     host,
		MaxConns: 4096,
		// Long-polls last up to 30 s; anything slower than this is a hang worth reporting.
		ReadTimeout:  90 * time.Second,
		WriteTimeout: 30 * time.Second,
		// Shorter than any sane server idle timeout, so a reused connection is not one the
		// server is closing.
		MaxIdleConnDuration:      5 * time.Second,
		NoDefaultUserAgentHeader: true,
		// Never resend: a resent pop could be delivered twice and a resent push stored twice,
		// which would be blamed on the broker. An error is an error.
		RetryIfErr: func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
	}}
	if u.Scheme == "https" {
		c.hc.IsTLS = true
		c.hc.TLSConfig = &tls.Config{RootCAs: roots, ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
	}
	if token != "" {
		c.auth = "Bearer " + token
	}
	return c, nil
}

// loadCA is the pool of CAs an https target may be signed by: the system's and the
// certificates of the PEM file path.
func loadCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the CA file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool() // no system roots on this machine: the file's alone
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("the CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// conn is one worker's request and response buffers, reused for every request it sends.
type conn struct {
	c    *client
	req  fasthttp.Request
	resp fasthttp.Response
}

func (c *client) conn() *conn { return &conn{c: c} }

// errHTTP is a non-2xx answer.
type errHTTP struct {
	status int
	body   string
}

func (e *errHTTP) Error() string { return fmt.Sprintf("HTTP %d: %s", e.status, e.body) }

// hasStatus reports whether err is an answer with that HTTP status.
func hasStatus(err error, status int) bool {
	var he *errHTTP
	return errors.As(err, &he) && he.status == status
}

// isSpoolFull reports the broker's answer to a push its disk spool had no room for.
func isSpoolFull(err error) bool {
	var he *errHTTP
	return errors.As(err, &he) && he.status == 503 && strings.Contains(he.body, `"code":"spool_full"`)
}

// do sends one request and returns the body, valid until the next call.
func (h *conn) do(method, path string, body []byte) ([]byte, error) {
	h.req.Reset()
	h.resp.Reset()
	h.req.Header.SetMethod(method)
	h.req.SetRequestURI(h.c.base + path)
	if h.c.auth != "" {
		h.req.Header.Set("Authorization", h.c.auth)
	}
	if body != nil {
		h.req.Header.SetContentType("application/json")
		h.req.SetBodyRaw(body)
	}
	if err := h.c.hc.Do(&h.req, &h.resp); err != nil {
		return nil, err
	}
	if sc := h.resp.StatusCode(); sc < 200 || sc > 299 {
		b := h.resp.Body()
		if len(b) > 200 {
			b = b[:200]
		}
		return nil, &errHTTP{status: sc, body: string(b)}
	}
	return h.resp.Body(), nil
}

// errorCounts are the failures of a scenario, counted where they happen.
type errorCounts struct {
	http      atomic.Int64 // non-2xx answers
	transport atomic.Int64 // connection errors, timeouts, undecodable bodies
	items     atomic.Int64 // push items not "queued", acks not successful
	first     atomic.Pointer[string]
}

func (e *errorCounts) note(err error) {
	var he *errHTTP
	if errors.As(err, &he) {
		e.http.Add(1)
	} else {
		e.transport.Add(1)
	}
	e.firstIs(err.Error())
}

func (e *errorCounts) firstIs(msg string) {
	e.first.CompareAndSwap(nil, &msg)
}

func (e *errorCounts) total() int64 { return e.http.Load() + e.transport.Load() + e.items.Load() }

// Errors is the JSON form of errorCounts.
type Errors struct {
	HTTP      int64  `json:"http"`
	Transport int64  `json:"transport"`
	Items     int64  `json:"items"`
	BrokerLog int    `json:"brokerLogErrors"`
	First     string `json:"first,omitempty"`
}

func (e *errorCounts) snapshot() Errors {
	out := Errors{HTTP: e.http.Load(), Transport: e.transport.Load(), Items: e.items.Load()}
	if f := e.first.Load(); f != nil {
		out.First = *f
	}
	return out
}

// pushResult is one entry of the push answer.
type pushResult struct {
	Status string `json:"status"`
	Error  string `json:"error"`
}

// push sends a prepared push body of n items and returns the per-item answers.
func (h *conn) push(body []byte, n int) ([]pushResult, error) {
	b, err := h.do("POST", "/api/v1/push", body)
	if err != nil {
		return nil, err
	}
	var res []pushResult
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("cannot decode push answer %.200q: %w", b, err)
	}
	if len(res) != n {
		return nil, fmt.Errorf("push of %d items answered %d results: %.200q", n, len(res), b)
	}
	return res, nil
}

// popMsg is one delivered message; data is decoded straight into the bench payload.
type popMsg struct {
	TransactionID string  `json:"transactionId"`
	PartitionID   string  `json:"partitionId"`
	Partition     string  `json:"partition"`
	LeaseID       string  `json:"leaseId"`
	Data          payload `json:"data"`
}

// popAnswer is a pop's answer; M is the shape of one delivered message.
type popAnswer[M any] struct {
	Success  bool   `json:"success"`
	Error    string `json:"error"`
	Messages []M    `json:"messages"`
}

// popParams are the query of a pop.
type popParams struct {
	queue   string
	group   string // "" for queue mode
	batch   int
	wait    bool
	timeout time.Duration
	autoAck bool
	// partitions is how many partitions one pop may claim (the broker's partitions parameter);
	// 0 leaves it to the broker (one).
	partitions int
}

func (p popParams) path() string {
	q := "/api/v1/pop/queue/" + url.PathEscape(p.queue) + "?batch=" + strconv.Itoa(p.batch)
	if p.wait {
		q += "&wait=true&timeout=" + strconv.FormatInt(p.timeout.Milliseconds(), 10)
	} else {
		q += "&wait=false"
	}
	if p.autoAck {
		q += "&autoAck=true"
	}
	if p.partitions > 0 {
		q += "&partitions=" + strconv.Itoa(p.partitions)
	}
	if p.group != "" {
		q += "&consumerGroup=" + url.QueryEscape(p.group)
	}
	return q
}

// pop returns the delivered messages; an empty answer (nothing available, long-poll timeout)
// is no error.
func (h *conn) pop(path string) ([]popMsg, error) {
	b, err := h.do("GET", path, nil)
	if err != nil {
		return nil, err
	}
	if msgs, ok := scanPop(b); ok {
		return msgs, nil
	}
	return decodePop[popMsg](b)
}

// popAs is pop for messages that do not carry the bench payload (a stream's sink summaries).
func popAs[M any](h *conn, path string) ([]M, error) {
	b, err := h.do("GET", path, nil)
	if err != nil {
		return nil, err
	}
	return decodePop[M](b)
}

// decodePop reads a pop answer with encoding/json.
func decodePop[M any](b []byte) ([]M, error) {
	if len(b) == 0 {
		return nil, nil // the reference omits empty bodies
	}
	var a popAnswer[M]
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("cannot decode pop answer %.200q: %w", b, err)
	}
	switch {
	case a.Success, a.Error == "no_available_partition":
		return a.Messages, nil
	}
	return nil, fmt.Errorf("pop failed: %.200q", b)
}

type ackResult struct {
	Success bool    `json:"success"`
	Error   *string `json:"error"`
}

// ackBody builds an ack/batch body completing every message of a pop.
func ackBody(dst []byte, msgs []popMsg, group string) []byte {
	dst = append(dst, `{"acknowledgments":[`...)
	for i, m := range msgs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"transactionId":`...)
		dst = appendJSONString(dst, m.TransactionID)
		dst = append(dst, `,"partitionId":`...)
		dst = appendJSONString(dst, m.PartitionID)
		if m.LeaseID != "" {
			dst = append(dst, `,"leaseId":`...)
			dst = appendJSONString(dst, m.LeaseID)
		}
		dst = append(dst, `,"status":"completed"}`...)
	}
	dst = append(dst, ']')
	if group != "" {
		dst = append(dst, `,"consumerGroup":`...)
		dst = appendJSONString(dst, group)
	}
	return append(dst, '}')
}

// ack sends an ack/batch body for n messages and returns how many were not acknowledged.
func (h *conn) ack(body []byte, n int) (failed int, err error) {
	b, err := h.do("POST", "/api/v1/ack/batch", body)
	if err != nil {
		return 0, err
	}
	res, ok := scanAcks(b)
	if !ok {
		if err := json.Unmarshal(b, &res); err != nil {
			return 0, fmt.Errorf("cannot decode ack answer %.200q: %w", b, err)
		}
	}
	if len(res) != n {
		return 0, fmt.Errorf("ack of %d messages answered %d results: %.200q", n, len(res), b)
	}
	for _, r := range res {
		if !r.Success {
			failed++
		}
	}
	return failed, nil
}

// appendJSONString appends s as a JSON string. The bench only sends names and ids it made or
// got back, so the escaping covers what JSON requires and nothing more.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

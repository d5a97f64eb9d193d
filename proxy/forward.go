package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"queen/proxy/pxdb"
)

// cell is a cell with the HTTP clients of its brokers.
type cell struct {
	pxdb.Cell
	client *upstreams
	host   string // the first broker's host[:port], sent as Host
}

// upstreams are a cell's brokers: requests go round them, and one that refuses connections is
// skipped for upstreamDownFor. Only a request that could not be sent (the connection was never
// made) goes on to the next broker, so a push is never sent twice by the proxy. Pushes keep to
// one broker per partition: each broker drains its own spool after a PostgreSQL outage, so the
// pushes of one partition spread over two brokers would come out interleaved (docs/operations.md,
// "Order during an outage"); kept on one they stay in order while it lives.
type upstreams struct {
	clients []*fasthttp.HostClient
	next    atomic.Uint32
	downTil []atomic.Int64 // Unix nanoseconds until which a broker is skipped
}

const upstreamDownFor = 3 * time.Second

// do sends req to a broker of the cell: the one key hashes to when key is not "" (a push's
// partition, see pushPartition), else the next in turn.
func (u *upstreams) do(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time, key string) error {
	n := len(u.clients)
	first := int(u.next.Add(1))
	if key != "" {
		h := fnv.New32a()
		_, _ = h.Write([]byte(key))
		first = int(h.Sum32() % uint32(n))
	}
	var err error
	for tries := 0; tries < 2*n; tries++ {
		i := (first + tries) % n
		// The first round skips brokers known down; the second tries them anyway.
		if tries < n && time.Now().UnixNano() < u.downTil[i].Load() {
			continue
		}
		if err = u.clients[i].DoDeadline(req, resp, deadline); err == nil || !notSent(err) {
			return err
		}
		u.downTil[i].Store(time.Now().Add(upstreamDownFor).UnixNano())
	}
	return err
}

// notSent reports whether err means the request never left: no connection could be made.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" || errors.Is(err, fasthttp.ErrDialTimeout)
}

// cellSet is the cells as last read; replaced whole on every read.
type cellSet struct {
	byName map[string]*cell
	only   *cell // the single cell, when there is exactly one: every host goes to it
}

// refreshCells reads the cells again, keeping the client (and its pooled connections) of a
// cell whose upstream did not change.
func (p *Proxy) refreshCells(ctx context.Context) error {
	rows, err := p.store.Cells(ctx)
	if err != nil {
		return fmt.Errorf("cannot read the cells: %w", err)
	}
	old := p.cells.Load()
	set := &cellSet{byName: make(map[string]*cell, len(rows))}
	for _, r := range rows {
		if old != nil {
			if c := old.byName[r.Name]; c != nil && c.Upstream == r.Upstream {
				set.byName[r.Name] = &cell{Cell: r, client: c.client, host: c.host}
				continue
			}
		}
		c, err := newCell(r)
		if err != nil {
			p.log.Error("cell has an unusable upstream; it is not served", "cell", r.Name, "upstream", r.Upstream, "err", err)
			continue
		}
		set.byName[r.Name] = c
	}
	if len(set.byName) == 1 {
		for _, c := range set.byName {
			set.only = c
		}
	}
	if old == nil || len(old.byName) != len(set.byName) {
		p.log.Info("cells loaded", "cells", len(set.byName))
	}
	p.cells.Store(set)
	return nil
}

func newCell(r pxdb.Cell) (*cell, error) {
	urls := pxdb.UpstreamURLs(r.Upstream)
	c := &cell{Cell: r, client: &upstreams{downTil: make([]atomic.Int64, len(urls))}}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("upstream %q is not an http(s) URL", raw)
		}
		addr := u.Host
		if u.Port() == "" {
			addr = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
		}
		if c.host == "" {
			c.host = u.Host
		}
		c.client.clients = append(c.client.clients, &fasthttp.HostClient{
			Addr:  addr,
			IsTLS: u.Scheme == "https",
			Name:  "queen-proxy",
			// Long-polls hold a connection each for their wait.
			MaxConns:                      4096,
			MaxIdleConnDuration:           30 * time.Second,
			DisableHeaderNamesNormalizing: true,
			DisablePathNormalizing:        true,
			NoDefaultUserAgentHeader:      true,
		})
	}
	return c, nil
}

// cellFor is the cell the request's Host names by its first DNS label, or the only cell.
func (p *Proxy) cellFor(ctx *fasthttp.RequestCtx) *cell {
	set := p.cells.Load()
	if set.only != nil {
		return set.only
	}
	host := string(ctx.Host())
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, _, _ := strings.Cut(strings.ToLower(host), ".")
	return set.byName[label]
}

// hopHeaders are not forwarded either way (RFC 9110 7.6.1), and the caller's credentials and
// tenant never reach the broker: the proxy puts the cell's in their place.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// The browser's origin headers go too: the proxy is the origin the browser talks to, and it
// checked them (sameOrigin); the broker behind it would see a foreign origin and refuse.
var strippedRequestHeaders = append([]string{"Authorization", "Cookie", "X-Queen-Tenant", "X-Forwarded-For",
	"X-Forwarded-Proto", "X-Forwarded-Host", "Forwarded", "X-Request-Id", "Origin", "Referer",
	"Sec-Fetch-Site", "Sec-Fetch-Mode", "Sec-Fetch-Dest", "Sec-Fetch-User"}, hopHeaders...)

// forward sends the request to the cell on the normalised path and copies the answer back. It
// returns the status answered.
func (p *Proxy) forward(ctx *fasthttp.RequestCtx, c *cell, rt route, id string) int {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)

	ctx.Request.Header.CopyTo(&req.Header)
	for _, h := range strippedRequestHeaders {
		req.Header.Del(h)
	}
	if c.BrokerToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.BrokerToken)
	}
	if c.Tenant != "" && p.cfg.TenantHeader {
		req.Header.Set("X-Queen-Tenant", c.Tenant)
	}
	req.Header.Set("X-Request-Id", id)
	req.Header.Set("X-Forwarded-For", clientIP(ctx))
	req.Header.Set("X-Forwarded-Proto", map[bool]string{true: "https", false: "http"}[ctx.IsTLS()])
	req.Header.SetHost(c.host)
	req.SetBody(ctx.Request.Body())

	args := ctx.QueryArgs()
	deadline := time.Now().Add(p.cfg.UpstreamTimeout)
	if wait, ok := p.longPoll(rt, args); ok {
		// The broker's wait ends first, with its own (empty) answer: the margin covers the
		// round trip and the broker's last re-check.
		deadline = time.Now().Add(wait + p.cfg.LongPollMargin)
	}
	uri := rt.path
	if q := args.QueryString(); len(q) > 0 {
		uri += "?" + string(q)
	}
	req.SetRequestURI(uri)

	start := time.Now()
	key := ""
	if rt.pattern == "/api/v1/push" {
		key = pushPartition(req.Body())
	}
	err := c.client.do(req, resp, deadline, key)
	switch {
	case errors.Is(err, fasthttp.ErrTimeout):
		p.metrics.upstreamError("timeout")
		writeJSON(ctx, fasthttp.StatusGatewayTimeout, answer{Code: "upstream_timeout", Error: "the broker did not answer in time"})
		return fasthttp.StatusGatewayTimeout
	case err != nil:
		p.metrics.upstreamError("unavailable")
		p.log.Warn("cannot reach the cell's broker", "cell", c.Name, "upstream", c.Upstream, "request_id", id, "err", err)
		writeJSON(ctx, fasthttp.StatusBadGateway, answer{Code: "upstream_unavailable", Error: "the broker cannot be reached"})
		return fasthttp.StatusBadGateway
	}
	p.metrics.upstream(string(rt.class), time.Since(start))
	resp.Header.CopyTo(&ctx.Response.Header)
	for _, h := range hopHeaders {
		ctx.Response.Header.Del(h)
	}
	ctx.Response.Header.Set("X-Request-Id", id)
	ctx.Response.SetBody(resp.Body())
	return resp.StatusCode()
}

// longPoll reports whether the request is a long-poll and how long the broker will wait,
// clamping the timeout the client asked for to QUEEN_PROXY_LONGPOLL_MAX_MS and writing it in
// the query, so the broker waits exactly as long as the proxy expects.
func (p *Proxy) longPoll(rt route, args *fasthttp.Args) (time.Duration, bool) {
	if rt.class != Consume || !bytes.Equal(args.Peek("wait"), []byte("true")) {
		return 0, false
	}
	// Without a timeout the broker waits its DEFAULT_TIMEOUT, which the proxy cannot know: it
	// sends the reference's default explicitly.
	wait := 30 * time.Second
	if v := args.Peek("timeout"); len(v) > 0 {
		if ms, err := strconv.Atoi(string(v)); err == nil && ms >= 0 {
			wait = time.Duration(ms) * time.Millisecond
		}
	}
	wait = min(wait, p.cfg.LongPollMax)
	args.Set("timeout", strconv.FormatInt(wait.Milliseconds(), 10))
	return wait, true
}

func clientIP(ctx *fasthttp.RequestCtx) string {
	if a, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return ctx.RemoteAddr().String()
}

// pushPartition is the queue and partition of a push body's first item ("Default" when it names
// none), read without decoding the rest of the body; "" when the body does not start as a push.
func pushPartition(body []byte) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	if !delim(dec, '{') {
		return ""
	}
	for dec.More() {
		name, err := dec.Token()
		if err != nil {
			return ""
		}
		if name != "items" {
			if dec.Decode(&json.RawMessage{}) != nil {
				return ""
			}
			continue
		}
		if !delim(dec, '[') || !delim(dec, '{') {
			return ""
		}
		var queue, partition string
		for dec.More() {
			field, err := dec.Token()
			if err != nil {
				return ""
			}
			var into any = &json.RawMessage{}
			switch field {
			case "queue":
				into = &queue
			case "partition":
				into = &partition
			}
			if dec.Decode(into) != nil {
				return ""
			}
		}
		if queue == "" {
			return ""
		}
		if partition == "" {
			partition = "Default"
		}
		return queue + "\x00" + partition
	}
	return ""
}

func delim(dec *json.Decoder, want json.Delim) bool {
	t, err := dec.Token()
	return err == nil && t == want
}

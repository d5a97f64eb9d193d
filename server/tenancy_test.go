package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"queen/config"
	"queen/pg/pgtest"
	"queen/server"
	"queen/server/servertest"
	"queen/testkit"
)

// tenancyOn turns tenancy on, as QUEEN_TENANCY_HEADER=true with QUEEN_KV_TRUSTED_PROXY=true does.
func tenancyOn(c *config.Config) { c.TenancyHeader, c.TrustedProxy = true, true }

// noInternalNames fails when a body shows a stored tenant name (U+001F, raw or escaped).
func noInternalNames(t *testing.T, what string, body []byte) {
	t.Helper()
	if bytes.Contains(body, []byte("\x1f")) || bytes.Contains(bytes.ToLower(body), []byte(`\u001f`)) {
		t.Fatalf("%s shows a stored tenant name: %s", what, body)
	}
}

// queueNames lists the queues a caller sees.
func queueNames(t *testing.T, c *servertest.Client) []string {
	t.Helper()
	var out struct {
		Queues []struct {
			Name string `json:"name"`
		} `json:"queues"`
	}
	status, body := c.Do("GET", "/api/v1/resources/queues", nil)
	if status != 200 {
		t.Fatalf("list queues: %d %s", status, body)
	}
	noInternalNames(t, "the queue list", body)
	c.JSON("GET", "/api/v1/resources/queues", nil, 200, &out)
	names := []string{}
	for _, q := range out.Queues {
		names = append(names, q.Name)
	}
	return names
}

// Two tenants use the same queue name: separate messages, consumer groups, listings and
// parked-pop metrics; a malformed tenant header is a 400.
func TestTenancySeparatesSameNamedQueues(t *testing.T) {
	c := startBroker(t, tenancyOn)
	acme := c.WithHeader("x-queen-tenant", "acme")
	globex := c.WithHeader("x-queen-tenant", "globex")
	tenants := map[string]*servertest.Client{"acme": acme, "globex": globex}

	for name, tc := range tenants {
		res := push(t, tc, item{"queue": "orders", "payload": map[string]any{"tenant": name, "n": 1}},
			item{"queue": "orders", "payload": map[string]any{"tenant": name, "n": 2}})
		for _, r := range res {
			if r.QueueName != "orders" || r.Status != "queued" {
				t.Fatalf("%s push: %+v", name, r)
			}
		}
	}

	t.Run("queue mode: each tenant pops only its own messages, and sees its own queue name", func(t *testing.T) {
		for name, tc := range tenants {
			p := pop(t, tc, "/api/v1/pop/queue/orders", "batch", "10")
			if p.Queue != "orders" || len(p.Messages) != 2 {
				t.Fatalf("%s pop: %s", name, fmtJSON(p))
			}
			for _, d := range payloads(p.Messages) {
				if !strings.Contains(d, `"tenant":"`+name+`"`) {
					t.Fatalf("%s popped %s", name, d)
				}
			}
			for _, a := range ackAll(t, tc, "", p.Messages) {
				if !a.Success || str(a.QueueName) != "orders" {
					t.Fatalf("%s ack: %s", name, fmtJSON(a))
				}
			}
		}

	})

	t.Run("a consumer group of the same name has a cursor per tenant", func(t *testing.T) {
		g := pop(t, acme, "/api/v1/pop/queue/orders", "batch", "10", "consumerGroup", "audit", "autoAck", "true")
		if len(g.Messages) != 2 || !strings.Contains(string(g.Messages[0].Data), "acme") {
			t.Fatalf("acme group pop: %s", fmtJSON(g))
		}
		if g := pop(t, acme, "/api/v1/pop/queue/orders", "batch", "10", "consumerGroup", "audit", "autoAck", "true"); len(g.Messages) != 0 {
			t.Fatalf("acme group pop again: %s", fmtJSON(g))
		}
		g = pop(t, globex, "/api/v1/pop/queue/orders", "batch", "10", "consumerGroup", "audit", "autoAck", "true")
		if len(g.Messages) != 2 || !strings.Contains(string(g.Messages[0].Data), "globex") {
			t.Fatalf("globex group pop after acme's group consumed: %s", fmtJSON(g))
		}

	})

	t.Run("listings show each tenant its own queue, under the name it knows", func(t *testing.T) {
		for name, tc := range tenants {
			if got := queueNames(t, tc); len(got) != 1 || got[0] != "orders" {
				t.Fatalf("%s queues: %v", name, got)
			}
			status, body := tc.Do("GET", "/api/v1/resources/queues/orders", nil)
			if status != 200 || !strings.Contains(string(body), `"name":"orders"`) {
				t.Fatalf("%s queue detail: %d %s", name, status, body)
			}
			for _, path := range []string{"/api/v1/consumer-groups", "/api/v1/messages", "/api/v1/consumer-groups/audit"} {
				status, body := tc.Do("GET", path, nil)
				if status != 200 {
					t.Fatalf("%s %s: %d %s", name, path, status, body)
				}
				noInternalNames(t, name+" "+path, body)
			}
			var groups []struct {
				Name      string `json:"name"`
				QueueName string `json:"queueName"`
			}
			tc.JSON("GET", "/api/v1/consumer-groups", nil, 200, &groups)
			for _, gr := range groups {
				if gr.QueueName != "orders" {
					t.Fatalf("%s consumer groups: %+v", name, groups)
				}
			}
			if len(groups) != 2 { // __QUEUE_MODE__ and audit, on this tenant's orders only
				t.Fatalf("%s consumer groups: %+v", name, groups)
			}
			var msgs struct {
				Messages []struct {
					Queue string `json:"queue"`
				} `json:"messages"`
			}
			tc.JSON("GET", "/api/v1/messages", nil, 200, &msgs)
			if len(msgs.Messages) != 2 {
				t.Fatalf("%s messages: %+v", name, msgs)
			}
		}
		if got := queueNames(t, c); len(got) != 0 {
			t.Fatalf("default tenant sees %v", got)
		}
		if status, body := c.Do("GET", "/api/v1/resources/queues/orders", nil); status != 404 {
			t.Fatalf("default tenant queue detail: %d %s", status, body)
		}
		if p := pop(t, c, "/api/v1/pop/queue/orders", "batch", "10", "consumerGroup", "fresh"); len(p.Messages) != 0 {
			t.Fatalf("default tenant popped %s", fmtJSON(p))
		}

	})

	t.Run("parked pops are counted per tenant, labelled with the name the tenant knows", func(t *testing.T) {
		for _, tc := range tenants {
			createQueue(t, tc, "parked")
		}
		var wg sync.WaitGroup
		got := map[string]popResponse{}
		var mu sync.Mutex
		for name, tc := range tenants {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var p popResponse
				tc.JSON("GET", "/api/v1/pop/queue/parked?wait=true&timeout=20000", nil, 200, &p)
				mu.Lock()
				got[name] = p
				mu.Unlock()
			}()
		}
		gauge := func(tenant string) string {
			return `queen_queue_parked_consumers{queue="parked",tenant="` + tenant + `"} 1`
		}
		waitFor(t, "both tenants' pops parked", func() bool {
			_, body := c.Do("GET", "/metrics/prometheus", nil)
			return strings.Contains(string(body), gauge("acme")) && strings.Contains(string(body), gauge("globex"))
		})
		_, body := c.Do("GET", "/metrics/prometheus", nil)
		noInternalNames(t, "/metrics/prometheus", body)
		for name, tc := range tenants {
			push(t, tc, item{"queue": "parked", "payload": map[string]any{"tenant": name}})
		}
		wg.Wait()
		for name, p := range got {
			if len(p.Messages) != 1 || !strings.Contains(string(p.Messages[0].Data), name) {
				t.Fatalf("%s parked pop: %s", name, fmtJSON(p))
			}
		}

	})

	t.Run("namespace and task derive from the name the tenant knows; a namespace pop stays in the tenant", func(t *testing.T) {
		push(t, acme, item{"queue": "billing.invoices", "payload": "acme-invoice"})
		if p := pop(t, globex, "/api/v1/pop", "namespace", "billing"); len(p.Messages) != 0 {
			t.Fatalf("globex namespace pop: %s", fmtJSON(p))
		}
		if p := pop(t, acme, "/api/v1/pop", "namespace", "billing", "task", "invoices"); len(p.Messages) != 1 || p.Queue != "billing.invoices" {
			t.Fatalf("acme namespace pop: %s", fmtJSON(p))
		}

	})

	t.Run("a malformed tenant header is refused; a queue name with U+001F always is", func(t *testing.T) {
		status, body := c.WithHeader("x-queen-tenant", "bad tenant!").Do("GET", "/api/v1/resources/queues", nil)
		if status != 400 || strings.TrimSpace(string(body)) != `{"error":"invalid x-queen-tenant header"}` {
			t.Fatalf("malformed tenant header: %d %s", status, body)
		}
		if status, body := c.Do("POST", "/api/v1/push", map[string]any{"items": []item{{"queue": "acme\x1forders", "payload": 1}}}); status != 400 {
			t.Fatalf("push to a stored tenant name: %d %s", status, body)
		}
	})
}

// With tenancy off the header is ignored: a push that carries it lands in the plain queue.
func TestTenancyOffIgnoresHeader(t *testing.T) {
	c := startBroker(t)
	push(t, c.WithHeader("x-queen-tenant", "acme"), item{"queue": "orders", "payload": "x"})
	push(t, c.WithHeader("x-queen-tenant", "bad tenant!"), item{"queue": "orders", "payload": "y"})
	if got := queueNames(t, c); len(got) != 1 || got[0] != "orders" {
		t.Fatalf("queues: %v", got)
	}
	if p := pop(t, c, "/api/v1/pop/queue/orders", "batch", "10"); len(p.Messages) != 2 {
		t.Fatalf("pop: %s", fmtJSON(p))
	}
	if status, body := c.Do("GET", "/api/v1/resources/queues/a%1Fb", nil); status != 400 {
		t.Fatalf("queue name with U+001F: %d %s", status, body)
	}
}

// QUEEN_TENANCY_HEADER=true without QUEEN_KV_TRUSTED_PROXY=true stops the boot.
func TestTenancyBootNeedsTrustedProxy(t *testing.T) {
	cfg, err := config.Load(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.TenancyHeader = true
	_, err = server.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), server.Options{ConnString: "postgres://127.0.0.1:1/none"})
	if err == nil || !strings.Contains(err.Error(), "QUEEN_KV_TRUSTED_PROXY") || !strings.Contains(err.Error(), "QUEEN_TENANCY_HEADER") {
		t.Fatalf("boot: %v, want an error naming QUEEN_TENANCY_HEADER and QUEEN_KV_TRUSTED_PROXY", err)
	}

	// With both set, one boot line says the header is honoured and who may set it.
	cfg.TrustedProxy = true
	cfg.SpoolDir = t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var buf testkit.LogBuffer
	b, err := server.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(&buf, nil)), server.Options{ConnString: pgtest.NewDatabase(t), Listener: ln})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = b.Shutdown(ctx)
	var lines []string
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "QUEEN_TENANCY_HEADER") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "trusted gateway") || !strings.Contains(lines[0], "x-queen-tenant") {
		t.Fatalf("tenancy boot lines: %q", lines)
	}
}

// The routes that act on a consumer group or read the dead-letter queue stay inside the
// caller's tenant: a dead letter, a group deletion and a seek in acme leave globex untouched.
func TestTenancyScopesDLQAndGroupControl(t *testing.T) {
	c := startBroker(t, tenancyOn)
	acme := c.WithHeader("x-queen-tenant", "acme")
	globex := c.WithHeader("x-queen-tenant", "globex")
	for _, tc := range []*servertest.Client{acme, globex} {
		push(t, tc, item{"queue": "orders", "payload": 1, "transactionId": "t1"}, item{"queue": "orders", "payload": 2, "transactionId": "t2"})
		// Group g reads t1 in both tenants.
		p := pop(t, tc, "/api/v1/pop/queue/orders", "consumerGroup", "g", "batch", "1", "autoAck", "true")
		if len(p.Messages) != 1 || p.Messages[0].TransactionID != "t1" {
			t.Fatalf("first pop: %+v", p)
		}
	}

	// acme dead-letters t2 for queue mode; globex's DLQ stays empty.
	p := pop(t, acme, "/api/v1/pop/queue/orders", "batch", "2")
	a := ack(t, acme, map[string]any{"transactionId": "t2", "partitionId": p.Messages[1].PartitionID, "leaseId": *p.LeaseID, "status": "dlq", "error": "bad"})
	if !a.DLQ {
		t.Fatalf("dlq ack: %+v", a)
	}
	var dlq struct {
		Total    int `json:"total"`
		Messages []struct {
			Queue string `json:"queue"`
		} `json:"messages"`
	}
	acme.JSON("GET", "/api/v1/dlq", nil, 200, &dlq)
	if dlq.Total != 1 || len(dlq.Messages) != 1 || dlq.Messages[0].Queue != "orders" {
		t.Fatalf("acme DLQ: %+v", dlq)
	}
	globex.JSON("GET", "/api/v1/dlq", nil, 200, &dlq)
	if dlq.Total != 0 {
		t.Fatalf("globex sees acme's dead letters: %+v", dlq)
	}

	// Seeking acme's group back to the start replays t1 there, not in globex.
	acme.JSON("POST", "/api/v1/consumer-groups/g/queues/orders/seek", map[string]any{"timestamp": "1970-01-01T00:00:00Z"}, 200, nil)
	if p := pop(t, acme, "/api/v1/pop/queue/orders", "consumerGroup", "g", "batch", "1", "autoAck", "true"); len(p.Messages) != 1 || p.Messages[0].TransactionID != "t1" {
		t.Fatalf("acme after seek: %+v", p)
	}
	if p := pop(t, globex, "/api/v1/pop/queue/orders", "consumerGroup", "g", "batch", "1", "autoAck", "true"); len(p.Messages) != 1 || p.Messages[0].TransactionID != "t2" {
		t.Fatalf("globex's cursor moved with acme's seek: %+v", p)
	}

	// Deleting acme's group leaves globex's cursor: globex has nothing left, acme starts over.
	acme.JSON("DELETE", "/api/v1/consumer-groups/g?deleteMetadata=true", nil, 200, nil)
	if p := pop(t, globex, "/api/v1/pop/queue/orders", "consumerGroup", "g", "autoAck", "true"); len(p.Messages) != 0 {
		t.Fatalf("globex's group lost its cursor: %+v", p)
	}
	if p := pop(t, acme, "/api/v1/pop/queue/orders", "consumerGroup", "g", "batch", "1", "autoAck", "true"); len(p.Messages) != 1 || p.Messages[0].TransactionID != "t1" {
		t.Fatalf("acme's deleted group should read from the start: %+v", p)
	}
}

// idRoute is a route that addresses a message by partition id or a lease by lease id.
type idRoute struct {
	name   string
	leased bool // the owner holds a lease on tx-1 while the route is tried
	send   func(c *servertest.Client, pid, lease string) (int, []byte)
}

var idRoutes = []idRoute{
	{"ack", false, func(c *servertest.Client, pid, _ string) (int, []byte) {
		return c.Do("POST", "/api/v1/ack", map[string]any{"transactionId": "tx-3", "partitionId": pid})
	}},
	{"ack of an unknown message", false, func(c *servertest.Client, pid, _ string) (int, []byte) {
		return c.Do("POST", "/api/v1/ack", map[string]any{"transactionId": "nope", "partitionId": pid})
	}},
	{"ack with the lease", true, func(c *servertest.Client, pid, lease string) (int, []byte) {
		return c.Do("POST", "/api/v1/ack", map[string]any{"transactionId": "tx-1", "partitionId": pid, "leaseId": lease, "status": "dlq", "error": "intruder"})
	}},
	{"ack batch", true, func(c *servertest.Client, pid, lease string) (int, []byte) {
		return c.Do("POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": []any{
			map[string]any{"transactionId": "tx-1", "partitionId": pid, "leaseId": lease, "status": "failed"},
			map[string]any{"transactionId": "tx-3", "partitionId": pid, "status": "completed"},
		}})
	}},
	{"transaction", true, func(c *servertest.Client, pid, lease string) (int, []byte) {
		return c.Do("POST", "/api/v1/transaction", map[string]any{"operations": []any{
			map[string]any{"type": "ack", "transactionId": "tx-1", "partitionId": pid, "leaseId": lease, "status": "completed"},
			map[string]any{"type": "push", "items": []item{{"queue": "mine", "payload": 1}}},
		}})
	}},
	{"lease extension", true, func(c *servertest.Client, _, lease string) (int, []byte) {
		return c.Do("POST", "/api/v1/lease/"+lease+"/extend", map[string]any{"seconds": 86400})
	}},
	{"trace recording", false, func(c *servertest.Client, pid, _ string) (int, []byte) {
		return c.Do("POST", "/api/v1/traces", map[string]any{"transactionId": "tx-1", "partitionId": pid, "data": map[string]any{"by": "intruder"}})
	}},
	{"trace read", false, func(c *servertest.Client, pid, _ string) (int, []byte) {
		return c.Do("GET", "/api/v1/traces/"+pid+"/tx-1", nil)
	}},
}

// answerShape is an answer with the ids it echoes replaced as given (old, new pairs) and the
// transaction route's fresh transactionId dropped, so two answers to different ids compare.
func answerShape(t *testing.T, body []byte, replace ...string) string {
	t.Helper()
	body = []byte(strings.NewReplacer(replace...).Replace(string(body)))
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("answer is not JSON: %s", body)
	}
	if m, ok := v.(map[string]any); ok {
		delete(m, "transactionId")
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// leaseExpiry reads when the queue-mode lease on a partition expires (zero: no lease).
func leaseExpiry(t *testing.T, c *servertest.Client, pid string) time.Time {
	t.Helper()
	var at *time.Time
	if err := c.Broker.Store().Pool().QueryRow(context.Background(), `SELECT lease_expires_at FROM queen.partition_consumers
		WHERE partition_id = $1 AND consumer_group = '__QUEUE_MODE__'`, pid).Scan(&at); err != nil {
		t.Fatalf("lease of %s: %v", pid, err)
	}
	if at == nil {
		return time.Time{}
	}
	return *at
}

// Every route that takes a partition id or a lease id stays inside the caller's tenant: another
// tenant's ids get exactly the answer random ids get, no answer names the other tenant's queue
// or partition, and the owner's cursor, lease, dead letters and traces are unchanged.
func TestTenancyRefusesAnotherTenantsPartitionAndLeaseIDs(t *testing.T) {
	c := startBroker(t, tenancyOn)
	owner := c.WithHeader("x-queen-tenant", "globex")
	intruders := []struct {
		name string
		c    *servertest.Client
	}{{"tenant acme", c.WithHeader("x-queen-tenant", "acme")}, {"the default tenant", c}}
	n := 0
	for _, rt := range idRoutes {
		for _, in := range intruders {
			n++
			what := rt.name + " by " + in.name
			part := fmt.Sprintf("globex-part-%d", n)
			res := push(t, owner,
				item{"queue": "globex-ledger", "partition": part, "transactionId": "tx-1", "payload": map[string]any{"n": 1}},
				item{"queue": "globex-ledger", "partition": part, "transactionId": "tx-2", "payload": map[string]any{"n": 2}},
				item{"queue": "globex-ledger", "partition": part, "transactionId": "tx-3", "payload": map[string]any{"n": 3}})
			pid := str(res[0].PartitionID)
			owner.JSON("POST", "/api/v1/traces", map[string]any{"transactionId": "tx-1", "partitionId": pid, "data": map[string]any{"by": "owner"}}, 200, nil)
			partPath := "/api/v1/pop/queue/globex-ledger/partition/" + part
			lease := uuid.NewString() // never used by the owner when the route needs no lease
			var expiry time.Time
			if rt.leased {
				p := pop(t, owner, partPath, "batch", "1")
				if len(p.Messages) != 1 || p.Messages[0].TransactionID != "tx-1" {
					t.Fatalf("%s: owner pop: %s", what, fmtJSON(p))
				}
				lease, expiry = *p.LeaseID, leaseExpiry(t, c, pid)
			}

			randomPID, randomLease := uuid.NewString(), uuid.NewString()
			fs, fb := rt.send(in.c, pid, lease)
			rs, rb := rt.send(in.c, randomPID, randomLease)
			if got, want := answerShape(t, fb, pid, randomPID, lease, randomLease), answerShape(t, rb); fs != rs || got != want {
				t.Errorf("%s: another tenant's ids answer %d %s, random ids %d %s", what, fs, fb, rs, rb)
			}
			if strings.Contains(string(fb)+string(rb), "globex") {
				t.Errorf("%s: an answer names the owner's queue or partition: %s / %s", what, fb, rb)
			}

			// The owner's state is as it left it.
			want := []string{`{"n":1}`, `{"n":2}`, `{"n":3}`}
			if rt.leased {
				if got := leaseExpiry(t, c, pid); !got.Equal(expiry) {
					t.Errorf("%s: the owner's lease expiry moved from %s to %s", what, expiry, got)
				}
				if a := ack(t, owner, map[string]any{"transactionId": "tx-1", "partitionId": pid, "leaseId": lease}); !a.Success || !a.LeaseReleased {
					t.Errorf("%s: the owner's ack with its lease: %s", what, fmtJSON(a))
				}
				want = want[1:]
			}
			if p := pop(t, owner, partPath, "batch", "10"); !slices.Equal(payloads(p.Messages), want) {
				t.Errorf("%s: owner pops %v, want %v", what, payloads(p.Messages), want)
			}
			var dlq struct {
				Total int `json:"total"`
			}
			owner.JSON("GET", "/api/v1/dlq?queue=globex-ledger&partition="+part, nil, 200, &dlq)
			if dlq.Total != 0 {
				t.Errorf("%s: the owner has %d dead letters", what, dlq.Total)
			}
			var traces struct {
				Traces []struct {
					Data json.RawMessage `json:"data"`
				} `json:"traces"`
			}
			owner.JSON("GET", "/api/v1/traces/"+pid+"/tx-1", nil, 200, &traces)
			if len(traces.Traces) != 1 || string(traces.Traces[0].Data) != `{"by":"owner"}` {
				t.Errorf("%s: the owner's traces of tx-1: %s", what, fmtJSON(traces))
			}
		}
	}
}

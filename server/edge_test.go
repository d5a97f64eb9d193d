package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"queen/config"
	"queen/server/servertest"
)

// What the HTTP edge refuses before any handler runs.

// fasthttp's own parse errors quote the raw request; the answer must not, or a client could pad
// its headers and read back what a gateway added to them.
func TestMalformedRequestAnswerEchoesNothing(t *testing.T) {
	c := startBroker(t)
	req := "GET /api/v1/resources/queues HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer gateway-secret-token\r\n" +
		"X-Pad: " + strings.Repeat("p", 16<<10) + "\r\nConnection: close\r\n\r\n"
	status, body := c.Raw(req)
	if status != 400 || string(body) != `{"error":"malformed HTTP request"}` {
		t.Fatalf("oversized header: %d %.300s", status, body)
	}
}

// A request with both Transfer-Encoding and Content-Length is a smuggling pattern (RFC 9112
// §6.3): it is answered and the connection closed, so what follows it is never read as a
// request of its own.
func TestSmugglingPatternClosesTheConnection(t *testing.T) {
	c := startBroker(t)
	conn, err := net.Dial("tcp", c.Broker.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	smuggled := "GET /api/v1/resources/queues HTTP/1.1\r\nHost: x\r\n\r\n"
	body := "0\r\n\r\n" + smuggled
	fmt.Fprintf(conn, "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s", len(body), body)
	r := bufio.NewReader(conn)
	first, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, first.Body)
	first.Body.Close()
	if second, err := http.ReadResponse(r, nil); err == nil {
		t.Fatalf("the smuggled request was answered: %d", second.StatusCode)
	}
}

// Cross-origin browser requests are refused unless QUEEN_CORS_ALLOWED_ORIGINS lists the origin,
// and no answer carries CORS headers for an origin not listed.
func TestCrossOriginBrowserRequests(t *testing.T) {
	c := startBroker(t)
	evil := c.WithHeader("Origin", "https://evil.example")
	status, header, body := evil.DoHeader("POST", "/api/v1/system/maintenance", map[string]any{"enabled": true})
	if status != 403 || !strings.Contains(string(body), "origin_not_allowed") || header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("cross-origin maintenance flip: %d %s %v", status, body, header)
	}
	var m struct {
		MaintenanceMode bool `json:"maintenanceMode"`
	}
	c.JSON("GET", "/api/v1/system/maintenance", nil, 200, &m)
	if m.MaintenanceMode {
		t.Fatal("a refused cross-origin request switched push maintenance on")
	}
	// A browser that sends no Origin on a GET still says where it comes from.
	if status, _ := c.WithHeader("Sec-Fetch-Site", "cross-site").Do("GET", "/api/v1/pop/queue/q", nil); status != 403 {
		t.Fatalf("Sec-Fetch-Site cross-site pop: %d", status)
	}
	// Same origin (the dashboard) and clients that are not browsers pass, without CORS headers.
	same := c.WithHeader("Origin", "http://"+c.Broker.Addr()).WithHeader("Sec-Fetch-Site", "same-origin")
	for _, cl := range []*servertest.Client{c, same} {
		status, header, _ := cl.DoHeader("GET", "/api/v1/resources/queues", nil)
		if status != 200 || header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("same-origin or non-browser read: %d %v", status, header)
		}
	}

	listed := startBroker(t, func(c *config.Config) { c.CORSOrigins = []string{"https://ops.example.com", "http://localhost:3000"} })
	ops := listed.WithHeader("Origin", "https://ops.example.com").WithHeader("Sec-Fetch-Site", "cross-site")
	status, header, _ = ops.DoHeader("GET", "/api/v1/resources/queues", nil)
	if status != 200 || header.Get("Access-Control-Allow-Origin") != "https://ops.example.com" {
		t.Fatalf("listed origin: %d %v", status, header)
	}
	status, header, _ = ops.DoHeader("OPTIONS", "/api/v1/push", nil)
	if status != 204 || header.Get("Access-Control-Allow-Origin") != "https://ops.example.com" || header.Get("Access-Control-Allow-Methods") == "" {
		t.Fatalf("preflight of a listed origin: %d %v", status, header)
	}
	if status, _ := listed.WithHeader("Origin", "https://evil.example").Do("OPTIONS", "/api/v1/push", nil); status != 403 {
		t.Fatalf("preflight of another origin: %d", status)
	}
}

// A body with more array entries than QUEEN_MAX_ITEMS_PER_REQUEST is refused before it is
// decoded, and nothing of it is stored.
func TestOversizedBatchesAreRefusedBeforeWork(t *testing.T) {
	c := startBroker(t, func(c *config.Config) { c.MaxRequestItems = 100 })
	items := func(n int, queue string) []item {
		out := make([]item, n)
		for i := range out {
			out[i] = item{"queue": queue, "payload": i}
		}
		return out
	}
	status, body := c.Do("POST", "/api/v1/push", map[string]any{"items": items(101, "big")})
	if status != 413 || !strings.Contains(string(body), "QUEEN_MAX_ITEMS_PER_REQUEST") || !strings.Contains(string(body), "items") {
		t.Fatalf("push of 101 items: %d %s", status, body)
	}
	if status, body := c.Do("GET", "/api/v1/resources/queues/big", nil); status != 404 {
		t.Fatalf("a refused push created its queue: %d %s", status, body)
	}
	push(t, c, items(100, "fits")...)

	acks := make([]map[string]any, 101)
	for i := range acks {
		acks[i] = map[string]any{"transactionId": fmt.Sprint(i), "partitionId": "0190f3c1-0000-7000-8000-000000000001", "status": "completed"}
	}
	if status, body := c.Do("POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks}); status != 413 {
		t.Fatalf("ack batch of 101: %d %s", status, body)
	}
	// A transaction counts its operations and their items together.
	ops := []map[string]any{{"type": "push", "items": items(60, "tx")}, {"type": "push", "items": items(60, "tx")}}
	if status, body := c.Do("POST", "/api/v1/transaction", map[string]any{"operations": ops}); status != 413 {
		t.Fatalf("transaction of 120 items: %d %s", status, body)
	}
	if status, _ := c.Do("GET", "/api/v1/resources/queues/tx", nil); status != 404 {
		t.Fatal("a refused transaction stored its pushes")
	}
}

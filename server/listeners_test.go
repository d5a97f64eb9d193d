package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"queen/config"
)

// With QUEEN_METRICS_BIND_ADDR the metrics routes answer on that listener only: 404 on the HTTP
// port (not the dashboard shell), and nothing but the metrics on the metrics listener.
func TestMetricsOnTheirOwnListener(t *testing.T) {
	t.Parallel()
	c := startBroker(t, func(c *config.Config) { c.MetricsBindAddr = "127.0.0.1:0" })
	addr := c.Broker.MetricsAddr()
	if addr == "" || addr == strings.TrimPrefix(c.Base, "http://") {
		t.Fatalf("metrics address %q (HTTP at %s)", addr, c.Base)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	get := func(url string) (int, string, string) {
		t.Helper()
		resp, err := hc.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}

	status, ctype, body := get("http://" + addr + "/metrics/prometheus")
	if status != 200 || !strings.HasPrefix(ctype, "text/plain") || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("metrics listener /metrics/prometheus: %d %s %.200s", status, ctype, body)
	}
	if status, _, body = get("http://" + addr + "/metrics"); status != 200 || !strings.Contains(body, `"database"`) {
		t.Fatalf("metrics listener /metrics: %d %s", status, body)
	}
	for _, path := range []string{"/health", "/api/v1/resources/queues", "/"} {
		if status, _, body = get("http://" + addr + path); status != 404 {
			t.Errorf("metrics listener %s: %d %s, want 404", path, status, body)
		}
	}
	for _, path := range []string{"/metrics", "/metrics/prometheus"} {
		status, _, body = get(c.Base + path)
		if status != 404 || body != `{"error":"Not Found","code":"no_such_route"}` {
			t.Errorf("HTTP port %s: %d %s, want the JSON 404", path, status, body)
		}
	}
	if status, _, _ = get(c.Base + "/health"); status != 200 {
		t.Errorf("HTTP port /health: %d", status)
	}

	// Without the variable they stay on the HTTP port.
	d := startBroker(t)
	if d.Broker.MetricsAddr() != "" {
		t.Fatalf("a metrics listener without QUEEN_METRICS_BIND_ADDR: %s", d.Broker.MetricsAddr())
	}
	if status, _, body = get(d.Base + "/metrics/prometheus"); status != 200 || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("HTTP port /metrics/prometheus by default: %d %.200s", status, body)
	}
}

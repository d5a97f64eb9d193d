package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"queen/config"
	"queen/server/servertest"
	"queen/testkit"
)

// spoolBound is FILE_BUFFER_MAX_BYTES in these tests: room for a few dozen pushes.
const spoolBound = 16 << 10

// fillSpool pushes the numbered items from first on, one per request, while the broker spools
// them, until the spool has no room: every push up to then answers 201 buffered, and that one
// and five more answer 503 with the spool-full error, which the metric counts. It returns how
// many were buffered (items first..first+n-1); the refused ones, numbered from first+n, must
// never be stored.
func fillSpool(t *testing.T, c *servertest.Client, queue string, parts []string, first int) int {
	t.Helper()
	pushOne := func(k int) (int, http.Header, []byte) {
		return c.DoHeader("POST", "/api/v1/push", map[string]any{"items": numbered(queue, parts, k, 1)})
	}
	refusedClearly := func(k, status int, hdr http.Header, raw []byte) {
		t.Helper()
		var body struct{ Error, Code string }
		if status != 503 || json.Unmarshal(raw, &body) != nil || body.Code != "spool_full" ||
			!strings.Contains(body.Error, "spool is full") || !strings.Contains(body.Error, "not stored") || hdr.Get("Retry-After") == "" {
			t.Fatalf("push %d: %d %v %s; want 503 with the spool-full error and Retry-After", k, status, hdr, raw)
		}
	}
	n := 0
	for ; ; n++ {
		if n > 5000 {
			t.Fatalf("%d pushes buffered and none refused: FILE_BUFFER_MAX_BYTES=%d is not applied", n, spoolBound)
		}
		status, hdr, raw := pushOne(first + n)
		if status == 503 {
			refusedClearly(first+n, status, hdr, raw)
			break
		}
		var res []pushResult
		if status != 201 || json.Unmarshal(raw, &res) != nil || len(res) != 1 || res[0].Status != "buffered" {
			t.Fatalf("push %d: %d %s; want 201 with the item buffered", first+n, status, raw)
		}
	}
	for k := first + n + 1; k < first+n+6; k++ {
		status, hdr, raw := pushOne(k)
		refusedClearly(k, status, hdr, raw)
	}
	if _, metrics := c.Do("GET", "/metrics/prometheus", nil); !strings.Contains(string(metrics), "queen_spool_full_refused_messages_total 6\n") {
		t.Errorf("the metrics do not count the 6 refused messages:\n%s", metrics)
	}
	b := buffers(t, c)
	if b.Pending != int64(n) || b.Bytes > spoolBound || b.Files != 1 {
		t.Fatalf("status/buffers with the spool full: %+v; want %d pending in one segment within %d bytes", b, n, spoolBound)
	}
	return n
}

// TestOutageSpoolFullAnswers503 stops PostgreSQL under a broker whose spool holds 16 KiB and
// pushes until the spool is full: the pushes until then are buffered in one segment (the drain
// does not seal one per tick while PostgreSQL is away), the rest are answered 503 with an error
// that says the spool is full and the push was not stored. Once PostgreSQL is back the spool
// drains to nothing and every push answered buffered is delivered exactly once, in order, and
// no refused one at all.
func TestOutageSpoolFullAnswers503(t *testing.T) {
	pg := newOutageCluster(t)
	c := servertest.Start(t, pg.cluster.ConnString("postgres"), func(c *config.Config) {
		c.SpoolMaxBytes = 16384
		c.SpoolFlush = 10 * time.Millisecond // many drain ticks while the spool fills
	})
	const queue = "bounded"
	parts := []string{"p0", "p1"}
	pushWant(t, c, 200, "queued", numbered(queue, parts, 0, 2)...)

	pg.stop(t)
	n := fillSpool(t, c, queue, parts, 2)
	if b := buffers(t, c); b.DBHealthy {
		t.Fatalf("status/buffers says PostgreSQL is healthy while it is stopped: %+v", b)
	}

	pg.start(t)
	testkit.WaitFor(t, time.Minute, "the spool to drain into PostgreSQL", func() bool {
		b := buffers(t, c)
		return b.DBHealthy && b.Pending == 0
	})
	if b := buffers(t, c); b.Files != 0 || b.Bytes != 0 {
		t.Fatalf("status/buffers after the drain: %+v; want no file and no byte", b)
	}
	checkNumbered(t, "after the outage", consumeAll(t, c, queue, ""), queue, parts, 0, 2+n)
	if stored := countStored(t, c, queue); stored != 2+n {
		t.Fatalf("%d messages in PostgreSQL, want %d", stored, 2+n)
	}
}

// TestMaintenanceSpoolFullAnswers503: under push maintenance a full spool answers 503 with the
// same clear error (it answered 500 "File buffer write failed" for any spool error), and
// turning maintenance off delivers every buffered push exactly once, in order.
func TestMaintenanceSpoolFullAnswers503(t *testing.T) {
	t.Parallel()
	c := startBroker(t, func(c *config.Config) { c.SpoolMaxBytes, c.SpoolFlush = 16384, 10*time.Millisecond })
	const queue = "bounded-maint"
	parts := []string{"p0", "p1", "p2"}
	setPushMaint(t, c, true)
	n := fillSpool(t, c, queue, parts, 0)
	setPushMaint(t, c, false)
	testkit.WaitFor(t, time.Minute, "the spool to drain into PostgreSQL", func() bool { return buffers(t, c).Pending == 0 })
	checkNumbered(t, "after maintenance", consumeAll(t, c, queue, ""), queue, parts, 0, n)
	if stored := countStored(t, c, queue); stored != n {
		t.Fatalf("%d messages in PostgreSQL, want %d", stored, n)
	}
}

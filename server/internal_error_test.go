package server_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"queen/pg/pgtest"
	"queen/server/servertest"
	"queen/testkit"
)

// An error the broker did not expect answers 500 with a request id and nothing of the
// database's text; the log line has both, so an operator finds the cause by the id.
func TestInternalErrorAnswersRequestIDOnly(t *testing.T) {
	cs := pgtest.NewDatabase(t)
	var buf testkit.LogBuffer
	c := servertest.StartLogged(t, cs, slog.New(slog.NewTextHandler(&buf, nil)))

	conn, err := pgx.Connect(context.Background(), cs)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "DROP TABLE queen.message_traces"); err != nil {
		t.Fatal(err)
	}

	status, header, body := c.DoHeader("GET", "/api/v1/traces/names", nil)
	var got map[string]string
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("answer %d %s: %v", status, body, err)
	}
	id := header.Get("X-Request-Id")
	if status != 500 || len(got) != 2 || got["error"] != "internal error" || got["requestId"] != id || len(id) != 16 {
		t.Fatalf("answer %d %s (X-Request-Id %q), want 500 {error: internal error, requestId: the header's id}", status, body, id)
	}
	var line string
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "request_id="+id) {
			line = l
		}
	}
	if !strings.Contains(line, "message_traces") || !strings.Contains(line, "does not exist") {
		t.Fatalf("no log line with request_id=%s and the database's error:\n%s", id, buf.String())
	}

	// Every answer carries an id, a fresh one each time.
	_, h1, _ := c.DoHeader("GET", "/health", nil)
	_, h2, _ := c.DoHeader("GET", "/health", nil)
	if a, b := h1.Get("X-Request-Id"), h2.Get("X-Request-Id"); a == "" || a == b {
		t.Fatalf("request ids %q and %q", a, b)
	}
}

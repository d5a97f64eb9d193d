package routes

import (
	"strings"
	"testing"

	"queen/auth"
)

// The table gives each kind of route its level, and has no duplicates.
func TestRouteTableLevels(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Table {
		key := r.Method + " " + r.Path
		if seen[key] {
			t.Errorf("duplicate route %s", key)
		}
		seen[key] = true
		var want auth.Level = -1
		switch {
		case r.Path == "/health", r.Path == "/status", strings.HasPrefix(r.Path, "/metrics"), r.Path == "/", strings.HasPrefix(r.Path, "/assets/"),
			strings.HasPrefix(r.Path, "/favicon"), strings.HasPrefix(r.Path, "/auth/"):
			want = auth.Public
		case r.Path == "/api/v1/push":
			want = auth.WriteOnly
		case strings.HasPrefix(r.Path, "/api/v1/system/"), strings.HasPrefix(r.Path, "/internal/"),
			strings.HasPrefix(r.Path, "/api/v1/dlq/") && strings.HasSuffix(r.Path, "/replay"),
			r.Method == "DELETE" && (strings.HasPrefix(r.Path, "/api/v1/resources/queues/") || strings.HasPrefix(r.Path, "/api/v1/consumer-groups/")),
			r.Method == "POST" && r.Path == "/api/v1/stats/refresh",
			r.Method == "DELETE" && strings.HasPrefix(r.Path, "/streams/v1/queries/"):
			want = auth.Admin
		case r.Path == "/streams/v1/state/get": // a read, though a POST
			want = auth.ReadOnly
		case strings.HasPrefix(r.Path, "/api/v1/pop"), r.Method == "POST", r.Method == "DELETE":
			want = auth.ReadWrite
		case r.Method == "GET":
			want = auth.ReadOnly
		}
		if r.Level != want {
			t.Errorf("%s is %s, want %s", key, r.Level, want)
		}
	}
	for _, must := range []string{"GET /auth/me", "GET /auth/login", "POST /auth/logout", "GET /", "POST /api/v1/push", "POST /api/v1/transaction"} {
		if !seen[must] {
			t.Errorf("route %s is missing", must)
		}
	}
}

package proxy

import (
	"net/url"
	"strings"
)

// Class is what a broker route does, the unit a credential is granted. Blocked is never
// granted: those routes are not forwarded at all.
type Class string

// Route classes (docs/proxy.md, "The route table").
const (
	Produce    Class = "produce"     // pushes
	Consume    Class = "consume"     // pops, acks, transactions, leases, stream cycles
	QueueAdmin Class = "queue_admin" // configure, delete, seek, replay: a tenant's own queues
	Read       Class = "read"        // listings, status, the dashboard shell
	Operator   Class = "operator"    // the cell itself: maintenance, the broker's figures
	Blocked    Class = "blocked"
)

// routeTable classifies every route of the broker (http.Routes; proxy tests fail when a
// broker route is missing here). A request matching none of them is Blocked: the table
// forwards nothing it cannot name.
var routeTable = []struct {
	method, pattern string
	class           Class
}{
	{"GET", "/health", Read},
	{"GET", "/status", Blocked},   // liveness of one broker process: the platform's, not a caller's
	{"GET", "/metrics", Operator}, // the dashboard's summary of the cell
	{"GET", "/metrics/prometheus", Operator},
	{"GET", "/", Read},
	{"GET", "/assets/{file:*}", Read},
	{"GET", "/favicon.ico", Read},
	{"GET", "/auth/me", Read},
	{"GET", "/auth/login", Read},   // answered by the proxy (its sign-in page)
	{"POST", "/auth/logout", Read}, // answered by the proxy (ends the session)

	{"POST", "/api/v1/configure", QueueAdmin},
	{"POST", "/api/v1/push", Produce},
	{"GET", "/api/v1/pop", Blocked}, // a pop with no queue reaches every queue of a namespace
	{"GET", "/api/v1/pop/queue/{queue}", Consume},
	{"GET", "/api/v1/pop/queue/{queue}/partition/{partition}", Consume},
	{"POST", "/api/v1/ack", Consume},
	{"POST", "/api/v1/ack/batch", Consume},
	{"POST", "/api/v1/transaction", Consume},
	{"POST", "/api/v1/lease/{leaseId}/extend", Consume},

	{"POST", "/api/v1/traces", Consume},
	{"GET", "/api/v1/traces/names", Read},
	{"GET", "/api/v1/traces/by-name/{traceName}", Read},
	{"GET", "/api/v1/traces/{partitionId}/{transactionId}", Read},

	{"GET", "/api/v1/resources/queues", Read},
	{"GET", "/api/v1/resources/queues/{queue}", Read},
	{"DELETE", "/api/v1/resources/queues/{queue}", QueueAdmin},
	{"GET", "/api/v1/messages", Read},
	{"GET", "/api/v1/messages/{partitionId}/{transactionId}", Read},
	{"DELETE", "/api/v1/messages/{partitionId}/{transactionId}", QueueAdmin},
	{"GET", "/api/v1/dlq", Read},
	{"POST", "/api/v1/dlq/{partitionId}/{transactionId}/replay", QueueAdmin},

	{"GET", "/api/v1/consumer-groups", Read},
	{"GET", "/api/v1/consumer-groups/lagging", Read},
	{"GET", "/api/v1/consumer-groups/{group}", Read},
	{"DELETE", "/api/v1/consumer-groups/{group}", QueueAdmin},
	{"POST", "/api/v1/consumer-groups/{group}/subscription", QueueAdmin},
	{"DELETE", "/api/v1/consumer-groups/{group}/queues/{queue}", QueueAdmin},
	{"POST", "/api/v1/consumer-groups/{group}/queues/{queue}/seek", QueueAdmin},
	{"POST", "/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek", QueueAdmin},

	{"GET", "/api/v1/status", Read},
	{"GET", "/api/v1/status/queues", Read},
	{"GET", "/api/v1/status/queues/{queue}", Read},
	{"GET", "/api/v1/status/queues/{queue}/messages", Read},
	{"GET", "/api/v1/status/analytics", Read},
	{"GET", "/api/v1/resources/overview", Read},
	{"GET", "/api/v1/resources/namespaces", Read},
	{"GET", "/api/v1/resources/tasks", Read},
	{"GET", "/api/v1/analytics/queue-lag", Read},
	{"GET", "/api/v1/analytics/queue-ops", Read},
	{"GET", "/api/v1/analytics/queue-parked-replicas", Read},
	{"GET", "/api/v1/analytics/retention", Read},
	{"GET", "/api/v1/analytics/system-metrics", Operator},
	{"GET", "/api/v1/analytics/worker-metrics", Operator},
	{"GET", "/api/v1/analytics/postgres-stats", Operator},
	{"POST", "/api/v1/stats/refresh", Blocked},

	{"POST", "/streams/v1/queries", Consume},
	{"DELETE", "/streams/v1/queries/{query}", QueueAdmin},
	{"POST", "/streams/v1/cycle", Consume},
	{"POST", "/streams/v1/state/get", Consume}, // a stream runner reads its own state

	{"GET", "/api/v1/status/buffers", Operator},
	{"GET", "/api/v1/system/maintenance", Operator},
	{"POST", "/api/v1/system/maintenance", Operator},
	{"GET", "/api/v1/system/maintenance/pop", Operator},
	{"POST", "/api/v1/system/maintenance/pop", Operator},
	{"GET", "/api/v1/system/shared-state", Operator}, // the mesh as the dashboard shows it
	{"GET", "/internal/api/shared-state/stats", Blocked},
	{"GET", "/internal/api/inter-instance/stats", Blocked},
	{"POST", "/internal/api/notify", Blocked},
}

// route is a request's place in the table.
type route struct {
	class   Class
	pattern string // "" when no route matched
	// path is the normalised path, re-encoded: what is forwarded.
	path string
}

// classify normalises rawPath (as it arrived, still percent-encoded) and finds its route.
// Anything it cannot normalise or name is Blocked.
func classify(method, rawPath string) route {
	segs, ok := normalise(rawPath)
	if !ok {
		return route{class: Blocked}
	}
	out := route{class: Blocked, path: "/" + joinEscaped(segs)}
	for _, r := range routeTable {
		if r.method == method && matches(r.pattern, segs) {
			out.class, out.pattern = r.class, r.pattern
			return out
		}
	}
	// HEAD is a GET without its body.
	if method == "HEAD" {
		out = classify("GET", rawPath)
	}
	return out
}

// normalise decodes the path's percent escapes once, drops empty segments (duplicate and
// trailing slashes) and resolves "." and ".." segments. It refuses what would let the proxy
// and the broker read one path two ways: a malformed escape, an escaped '/' or '\' (one
// segment here, two there), a backslash, a NUL or other control character, a ';' (a path
// parameter to some servers, part of the segment to others), and ".." above the root.
func normalise(rawPath string) ([]string, bool) {
	if !strings.HasPrefix(rawPath, "/") {
		return nil, false
	}
	var segs []string
	for _, raw := range strings.Split(rawPath[1:], "/") {
		if raw == "" {
			continue
		}
		seg, err := url.PathUnescape(raw)
		if err != nil || strings.ContainsAny(seg, "/\\;") {
			return nil, false
		}
		for i := 0; i < len(seg); i++ {
			if seg[i] < 0x20 || seg[i] == 0x7f {
				return nil, false
			}
		}
		switch seg {
		case ".":
		case "..":
			if len(segs) == 0 {
				return nil, false
			}
			segs = segs[:len(segs)-1]
		default:
			segs = append(segs, seg)
		}
	}
	return segs, true
}

// joinEscaped is the path of segs, each escaped as a path segment.
func joinEscaped(segs []string) string {
	esc := make([]string, len(segs))
	for i, s := range segs {
		esc[i] = url.PathEscape(s)
	}
	return strings.Join(esc, "/")
}

// matches reports whether segs fit pattern: a {name} matches one segment, a {name:*} the rest
// (at least one segment), anything else itself exactly (case matters, as in the broker).
func matches(pattern string, segs []string) bool {
	parts := strings.Split(strings.Trim(pattern, "/"), "/")
	if pattern == "/" {
		parts = nil
	}
	for i, p := range parts {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, ":*}") {
			return i < len(segs)
		}
		if i >= len(segs) {
			return false
		}
		if strings.HasPrefix(p, "{") {
			continue
		}
		if p != segs[i] {
			return false
		}
	}
	return len(parts) == len(segs)
}

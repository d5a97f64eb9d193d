package proxy

import (
	"strings"
	"testing"

	"queen/routes"
)

// Each broker route, filled in as a client would, classifies to its own entry.
func TestClassifyFindsEachRoute(t *testing.T) {
	for _, r := range routes.Table {
		path := strings.NewReplacer("{queue}", "orders", "{partition}", "p-1", "{group}", "g",
			"{leaseId}", "0190f3c1-0000-7000-8000-000000000002", "{partitionId}", "0190f3c1-0000-7000-8000-000000000001",
			"{transactionId}", "tx", "{traceName}", "t", "{query}", "q.s", "{file:*}", "js/app.js").Replace(r.Path)
		got := classify(r.Method, path)
		if got.class != r.Class || got.pattern != r.Path || got.path != path {
			t.Errorf("%s %s: %+v, want class %s of %s", r.Method, path, got, r.Class, r.Path)
		}
	}
}

// Path tricks never reach a blocked route, and what is classified is what is forwarded.
func TestPathTricks(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		class        Class
		forward      string // the forwarded path when not blocked
	}{
		{"GET", "//internal/api/shared-state/stats", Blocked, ""},
		{"POST", "//internal/api/notify", Blocked, ""},
		{"POST", "/api/v1/push/../../../internal/api/notify", Blocked, ""},
		{"POST", "/api/v1/push/%2e%2e/%2e%2e/%2e%2e/internal/api/notify", Blocked, ""},
		{"POST", "/api/v1/push/%2E%2E/%2E%2E/%2E%2E/internal/api/notify", Blocked, ""},
		{"GET", "/api/v1/pop/queue/x%2F..%2F..%2F..%2Finternal", Blocked, ""},
		{"GET", "/api/v1/pop/queue/a%2fb", Blocked, ""},
		{"GET", "/api/v1/pop/queue/a%5Cb", Blocked, ""},
		{"GET", "/api/v1/pop/queue/a\\b", Blocked, ""},
		{"GET", "/API/v1/system/maintenance", Blocked, ""},
		{"GET", "/Api/V1/Pop/queue/q", Blocked, ""},
		{"POST", "/internal/api/notify/", Blocked, ""},
		{"GET", "/api/v1/system;x=1/maintenance", Blocked, ""},
		{"POST", "/api/v1/push;jsessionid=1", Blocked, ""},
		{"GET", "/api/v1/pop/queue/q%00", Blocked, ""},
		{"GET", "/api/v1/pop/queue/q%zz", Blocked, ""},
		{"GET", "/..", Blocked, ""},
		{"GET", "/api/v1/pop", Blocked, ""},
		{"GET", "/api/v1/pop/", Blocked, ""},
		{"GET", "/api/v1/unknown", Blocked, ""},
		{"GET", "/metrics/", Operator, "/metrics"},
		{"GET", "/status/", Blocked, ""},
		{"GET", "relative", Blocked, ""},
		// Normalised, then classified as what they are.
		{"POST", "/api/v1/push/", Produce, "/api/v1/push"},
		{"POST", "//api//v1///push", Produce, "/api/v1/push"},
		{"POST", "/api/./v1/push", Produce, "/api/v1/push"},
		{"POST", "/api/v1/x/../push", Produce, "/api/v1/push"},
		{"GET", "/api/v1/pop/queue/%6frders", Consume, "/api/v1/pop/queue/orders"},
		{"GET", "/api/v1/pop/queue/caf%C3%A9%20bar", Consume, "/api/v1/pop/queue/caf%C3%A9%20bar"},
		{"GET", "/api/v1/pop/queue/a%252Fb", Consume, "/api/v1/pop/queue/a%252Fb"},
		{"HEAD", "/api/v1/resources/queues", Read, "/api/v1/resources/queues"},
		{"POST", "/api/v1/system/maintenance/", Operator, "/api/v1/system/maintenance"},
	} {
		got := classify(tc.method, tc.path)
		if got.class != tc.class {
			t.Errorf("%s %s: class %s (%s), want %s", tc.method, tc.path, got.class, got.pattern, tc.class)
			continue
		}
		if tc.class != Blocked && got.path != tc.forward {
			t.Errorf("%s %s: forwards %q, want %q", tc.method, tc.path, got.path, tc.forward)
		}
	}
}

// The normaliser's promises on any input: the forwarded path normalises to itself, holds no
// segment the broker could read as a traversal or a second segment, and classifies the same.
func FuzzNormalise(f *testing.F) {
	for _, s := range []string{"/api/v1/push", "//a//b/", "/a/%2e%2e/b", "/%2F", "/a;b", "/..", "/a/./b/../c",
		"/api/v1/pop/queue/caf%C3%A9", "/%25", "/\x00", "/a%5c", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		segs, ok := normalise(raw)
		if !ok {
			return
		}
		for _, s := range segs {
			if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\\;") {
				t.Fatalf("normalise(%q) kept segment %q", raw, s)
			}
		}
		fwd := "/" + joinEscaped(segs)
		again, ok := normalise(fwd)
		if !ok || strings.Join(again, "\x00") != strings.Join(segs, "\x00") {
			t.Fatalf("normalise(%q) = %q, forwarded as %q which normalises to %q (%v)", raw, segs, fwd, again, ok)
		}
		for _, m := range []string{"GET", "POST", "DELETE"} {
			a, b := classify(m, raw), classify(m, fwd)
			if a != b {
				t.Fatalf("%s %q classifies as %+v, its forwarded form %q as %+v", m, raw, a, fwd, b)
			}
		}
	})
}

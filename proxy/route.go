package proxy

import (
	"net/url"
	"strings"

	"queen/routes"
)

// Class is what a broker route does, the unit a credential is granted (routes.Class: the
// broker's route table declares each route's class).
type Class = routes.Class

// Route classes (docs/proxy.md, "The route table").
const (
	Produce    = routes.Produce
	Consume    = routes.Consume
	QueueAdmin = routes.QueueAdmin
	Read       = routes.Read
	Operator   = routes.Operator
	Blocked    = routes.Blocked
)

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
	// The broker's own table: a request matching none of its routes is Blocked, so the front
	// door forwards nothing it cannot name.
	for _, r := range routes.Table {
		if r.Method == method && matches(r.Path, segs) {
			out.class, out.pattern = r.Class, r.Path
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

package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"queen/routes"
)

// The validation boundary (http/boundary.go), route by route. Every route of the table gets
// hostile values in each path parameter, in query values, and in each string of a sample body;
// a new route is walked without editing this test, and one that takes a body fails it until
// it has a sample body here.

// hostile values every string must be refused for, as they travel in a URL and in JSON.
var hostile = []struct {
	name      string
	url       string // percent-encoded, for paths and queries
	json      []byte // inside a JSON string's quotes
	wantWords string // what the error says after the parameter's name
}{
	{"NUL", "a%00b", []byte(`a\u0000b`), `must not contain the character \u0000`},
	{"invalid UTF-8", "%ff%fe", []byte("\xff\xfe"), "must be valid UTF-8"},
	{"truncated UTF-8", "%c3%28", []byte("\xc3\x28"), "must be valid UTF-8"},
	{"overlong", strings.Repeat("x", 1100), bytes.Repeat([]byte("x"), 70000), "must be at most"},
}

// odd values are valid strings: they must never be a 5xx, whatever the route makes of them.
var odd = []string{"..", "%2e%2e", "a%2Fb", "%2F", "x'; DROP TABLE queen.messages;--", "../../etc/passwd", "%E2%80%AE", "a%20b", "%25"}

// validParam is a well-formed value for each path parameter.
var validParam = map[string]string{
	"queue": "q", "partition": "Default", "group": "g", "traceName": "t", "transactionId": "tx",
	"partitionId": "0190f3c1-0000-7000-8000-000000000001", "leaseId": "0190f3c1-0000-7000-8000-000000000002",
	"file": "app.js", "query": "q.stream",
}

// sampleBodies are valid bodies of the routes that take one, by "METHOD path".
var sampleBodies = map[string]string{
	"POST /api/v1/configure": `{"queue":"q","namespace":"ns","task":"t","options":{"leaseTime":30}}`,
	"POST /api/v1/push":      `{"items":[{"queue":"q","partition":"p","transactionId":"tx","payload":{"k":"v"}}]}`,
	"POST /api/v1/ack": `{"transactionId":"tx","partitionId":"0190f3c1-0000-7000-8000-000000000001",` +
		`"leaseId":"0190f3c1-0000-7000-8000-000000000002","consumerGroup":"g","status":"failed","error":"e"}`,
	"POST /api/v1/ack/batch": `{"consumerGroup":"g","acknowledgments":[{"transactionId":"tx",` +
		`"partitionId":"0190f3c1-0000-7000-8000-000000000001","status":"completed"}]}`,
	"POST /api/v1/transaction": `{"operations":[{"type":"ack","transactionId":"tx","partitionId":"0190f3c1-0000-7000-8000-000000000001",` +
		`"status":"completed"},{"type":"push","items":[{"queue":"q","partition":"p","payload":1}]}]}`,
	"POST /api/v1/lease/{leaseId}/extend": `{"seconds":60}`,
	"POST /api/v1/traces": `{"transactionId":"tx","partitionId":"0190f3c1-0000-7000-8000-000000000001",` +
		`"consumerGroup":"g","eventType":"info","traceNames":["n"],"data":{"x":1}}`,
	"POST /api/v1/consumer-groups/{group}/subscription":                               `{"subscriptionTimestamp":"2024-01-01T00:00:00Z"}`,
	"POST /api/v1/consumer-groups/{group}/queues/{queue}/seek":                        `{"timestamp":"2024-01-01T00:00:00Z"}`,
	"POST /api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek": `{"timestamp":"2024-01-01T00:00:00Z"}`,
	"POST /api/v1/system/maintenance":                                                 `{"enabled":false}`,
	"POST /api/v1/system/maintenance/pop":                                             `{"enabled":false}`,
	"POST /internal/api/notify":                                                       `{"queue":"q","partition":"p"}`,
	"POST /auth/logout":                                                               `{}`,
	"POST /api/v1/stats/refresh":                                                      `{}`,
	"POST /api/v1/dlq/{partitionId}/{transactionId}/replay":                           `{}`,
	"POST /streams/v1/queries":                                                        `{"name":"q.stream","source_queue":"q","sink_queue":"s","config_hash":"h","reset":false}`,
	"POST /streams/v1/cycle": `{"query_id":"0190f3c1-0000-7000-8000-000000000003","partition_id":"0190f3c1-0000-7000-8000-000000000001",` +
		`"consumer_group":"g","state_ops":[{"type":"upsert","key":"k","value":{"n":1}},{"type":"delete","key":"k2"}],` +
		`"push_items":[{"queue":"s","partition":"p","transactionId":"tx","payload":{"k":"v"}}],` +
		`"ack":{"transactionId":"tx","leaseId":"0190f3c1-0000-7000-8000-000000000002","status":"completed","count":1},"release_lease":true}`,
	"POST /streams/v1/state/get": `{"query_id":"0190f3c1-0000-7000-8000-000000000003","partition_id":"0190f3c1-0000-7000-8000-000000000001",` +
		`"keys":["k"],"key_prefix":"k","ripe_at_or_before":1}`,
}

// queryKeys are put in every route's query string: the boundary checks every key, read or not.
var queryKeys = []string{"queue", "partition", "consumerGroup", "namespace", "task", "from", "to", "subscriptionFrom", "limit", "unreadKey"}

var paramPattern = regexp.MustCompile(`\{([A-Za-z]+)(:\*)?\}`)

// fill builds a route's path with value (already percent-encoded) in parameter target and valid
// values in the others.
func fill(path, target, value string) string {
	return paramPattern.ReplaceAllStringFunc(path, func(m string) string {
		name := paramPattern.FindStringSubmatch(m)[1]
		if name == target {
			return value
		}
		return validParam[name]
	})
}

// checkRefused asserts a 400 (or 413 for the overlong body) whose JSON error names field.
func checkRefused(t *testing.T, what string, status int, body []byte, field, words string) {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	if status != 400 && status != 413 || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, field) || !strings.Contains(e.Error, words) {
		t.Errorf("%s: got %d %.300s, want 400 with an error naming %q (%s)", what, status, body, field, words)
	}
}

// checkNot5xx asserts an answer below 500.
func checkNot5xx(t *testing.T, what string, status int, body []byte) {
	t.Helper()
	if status >= 500 {
		t.Errorf("%s: got %d %.300s", what, status, body)
	}
}

func TestBoundaryRefusesHostileInputOnEveryRoute(t *testing.T) {
	c := startBroker(t)
	// Something to find, so that odd names meet real rows too.
	push(t, c, item{"queue": "q", "partition": "Default", "transactionId": "tx", "payload": 1})

	for _, rt := range routes.Table {
		key := rt.Method + " " + rt.Path
		params := paramPattern.FindAllStringSubmatch(rt.Path, -1)
		sample, hasBody := sampleBodies[key]
		if rt.Method == "POST" && !hasBody {
			t.Errorf("%s: add a sample body to sampleBodies so that its strings are walked", key)
			continue
		}
		var body any
		if hasBody {
			body = sample
		}
		for _, p := range params {
			name := p[1]
			for _, h := range hostile {
				v := h.url
				if name != "file" && len(v) > 1000 {
					v = v[:300] // a path parameter's cap is at most 255; the request line stays short
				}
				status, out := c.Do(rt.Method, fill(rt.Path, name, v), body)
				checkRefused(t, fmt.Sprintf("%s with %s in %s", key, h.name, name), status, out, name, h.wantWords)
			}
			for _, v := range odd {
				status, out := c.Do(rt.Method, fill(rt.Path, name, v), body)
				checkNot5xx(t, fmt.Sprintf("%s with %q in %s", key, v, name), status, out)
			}
		}
		path := fill(rt.Path, "", "")
		for _, q := range queryKeys {
			for _, h := range hostile {
				status, out := c.Do(rt.Method, path+"?"+q+"="+h.url, body)
				checkRefused(t, fmt.Sprintf("%s with %s in query %s", key, h.name, q), status, out, q, h.wantWords)
			}
			for _, v := range odd {
				status, out := c.Do(rt.Method, path+"?"+q+"="+url.QueryEscape(v), body)
				checkNot5xx(t, fmt.Sprintf("%s with %q in query %s", key, v, q), status, out)
			}
		}
		if hasBody {
			for _, leaf := range stringLeaves(t, sample) {
				for _, h := range hostile {
					mutated := sample[:leaf.start] + string(h.json) + sample[leaf.end:]
					status, out := c.Do(rt.Method, path, []byte(mutated))
					checkRefused(t, fmt.Sprintf("%s with %s in body %s", key, h.name, leaf.field), status, out, leaf.field, h.wantWords)
				}
				for _, v := range odd {
					quoted, _ := json.Marshal(v)
					mutated := sample[:leaf.start] + string(quoted[1:len(quoted)-1]) + sample[leaf.end:]
					status, out := c.Do(rt.Method, path, []byte(mutated))
					checkNot5xx(t, fmt.Sprintf("%s with %q in body %s", key, v, leaf.field), status, out)
				}
			}
		}
	}

	// A raw request line with bytes no client would percent-encode.
	status, out := c.Raw("GET /api/v1/resources/queues/\xff\xfe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	checkRefused(t, "raw invalid UTF-8 in the request line", status, out, "queue", "must be valid UTF-8")
	status, out = c.Raw("GET /api/v1/resources/queues/a%zz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	checkRefused(t, "a malformed percent escape", status, out, "queue", "is not validly percent-encoded")
}

// leaf is a string value of a sample body: its field path and where its text sits.
type leaf struct {
	field      string
	start, end int
}

// stringLeaves lists the string values of a JSON body outside payload and data, which the route
// stores as the client's own JSON.
func stringLeaves(t *testing.T, body string) []leaf {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(body))
	var out []leaf
	var walk func(path string)
	walk = func(path string) {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("sample body %s: %v", body, err)
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				for dec.More() {
					k, _ := dec.Token()
					name := k.(string)
					sub := name
					if path != "" {
						sub = path + "." + name
					}
					if name == "payload" || name == "data" {
						var skip json.RawMessage
						if err := dec.Decode(&skip); err != nil {
							t.Fatal(err)
						}
						continue
					}
					walk(sub)
				}
				dec.Token()
			case '[':
				for i := 0; dec.More(); i++ {
					walk(fmt.Sprintf("%s[%d]", path, i))
				}
				dec.Token()
			}
		case string:
			end := int(dec.InputOffset()) - 1 // before the closing quote
			out = append(out, leaf{field: path, start: end - len(v), end: end})
		}
	}
	walk("")
	return out
}

package conformance_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"queen/pg/pgtest"
	"queen/server/servertest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// exchange is one request as a client sends it, with what the client reads of the answer and
// what must be true of the data afterwards. Paths and bodies name the values of the session
// as $NAME: $Q and $OUT are queues of the case's own, $G a consumer group, and given sets the
// rest ($PID, $LEASE, $TX1, ...).
type exchange struct {
	name         string
	given        func(s *session)
	method, path string
	body         string
	header       []string // name, value pairs
	status       int
	reads        []field
	then         func(s *session, answer any)
}

// field is what a client reads at a path of the answer ("0.status", "messages.1.data"), and
// what it must find: a JSON value as encoding/json decodes it (string, float64, bool, nil,
// map, slice), or one of the kinds below.
type field struct {
	path string
	want any
}

type kind string

const (
	absent    kind = "absent"
	text      kind = "a non-empty string"
	anID      kind = "a UUID"
	aTime     kind = "an RFC 3339 UTC time"
	aNumber   kind = "a number"
	emptyList kind = "an empty array"
)

// session is one broker and the values exchanges refer to.
type session struct {
	t     *testing.T
	c     *servertest.Client
	vars  map[string]string
	fresh int // numbers consumer groups made up to read a queue
}

// replay runs each exchange as a subtest on one broker; each gets queues of its own.
func replay(t *testing.T, exchanges []exchange) {
	c := servertest.Start(t, pgtest.NewDatabase(t))
	for i, x := range exchanges {
		t.Run(x.name, func(t *testing.T) {
			s := &session{t: t, c: c, vars: map[string]string{
				"Q": fmt.Sprintf("q%d", i), "OUT": fmt.Sprintf("out%d", i), "G": fmt.Sprintf("g%d", i),
			}}
			if x.given != nil {
				x.given(s)
			}
			answer := s.send(x)
			if x.then != nil {
				x.then(s, answer)
			}
		})
	}
}

// send makes the exchange's request and checks the status and the fields read.
func (s *session) send(x exchange) any {
	s.t.Helper()
	c := s.c
	for i := 0; i+1 < len(x.header); i += 2 {
		c = c.WithHeader(x.header[i], s.expand(x.header[i+1]))
	}
	var body any
	if x.body != "" {
		body = s.expand(x.body)
	}
	path := s.expand(x.path)
	status, raw := c.Do(x.method, path, body)
	if status != x.status {
		s.t.Fatalf("%s %s: status %d, want %d; body %s", x.method, path, status, x.status, raw)
	}
	var answer any
	if err := json.Unmarshal(raw, &answer); err != nil {
		s.t.Fatalf("%s %s: the answer is not JSON: %q", x.method, path, raw)
	}
	for _, f := range x.reads {
		s.check(answer, f)
	}
	return answer
}

// expand replaces $NAME with the session's value; a name the session lacks fails the test.
func (s *session) expand(text string) string {
	return os.Expand(text, func(name string) string {
		v, ok := s.vars[name]
		if !ok {
			s.t.Fatalf("the exchange refers to $%s, which nothing set", name)
		}
		return v
	})
}

// lookup walks a dotted path of object keys and array indices.
func lookup(v any, path string) (any, bool) {
	for _, step := range strings.Split(path, ".") {
		switch node := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = node[step]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(step)
			if err != nil || i < 0 || i >= len(node) {
				return nil, false
			}
			v = node[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func (s *session) check(answer any, f field) {
	s.t.Helper()
	got, found := lookup(answer, f.path)
	k, isKind := f.want.(kind)
	if !found {
		if k != absent {
			s.t.Fatalf("the answer has no %s: %s", f.path, compact(answer))
		}
		return
	}
	ok := true
	switch {
	case !isKind:
		if str, isStr := f.want.(string); isStr {
			f.want = s.expand(str)
		}
		ok = compact(got) == compact(f.want)
	case k == absent:
		ok = false
	case k == text:
		str, isStr := got.(string)
		ok = isStr && str != ""
	case k == anID:
		str, _ := got.(string)
		_, err := uuid.Parse(str)
		ok = err == nil
	case k == aTime:
		str, _ := got.(string)
		ok = strings.HasSuffix(str, "Z") && len(str) >= len("2006-01-02T15:04:05Z")
	case k == aNumber:
		_, ok = got.(float64)
	case k == emptyList:
		list, isList := got.([]any)
		ok = isList && len(list) == 0
	}
	if !ok {
		s.t.Fatalf("%s is %s, want %v; answer %s", f.path, compact(got), f.want, compact(answer))
	}
}

func compact(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// do sends a request outside the exchange under test (setting up, or looking at the data) and
// decodes the answer; any status but 200 fails the test.
func (s *session) do(method, path string, body any) any {
	s.t.Helper()
	if str, ok := body.(string); ok {
		body = s.expand(str)
	}
	path = s.expand(path)
	status, raw := s.c.Do(method, path, body)
	if status != 200 {
		s.t.Fatalf("%s %s: status %d: %s", method, path, status, raw)
	}
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		s.t.Fatalf("%s %s: %q is not JSON", method, path, raw)
	}
	return out
}

// push stores payloads (JSON texts) in queue/partition, in order, under the transactionIds
// tx-1, tx-2, ... of that queue, and sets $PID to the partition's id.
func (s *session) push(queue, partition string, payloads ...string) {
	s.t.Helper()
	items := make([]string, len(payloads))
	for i, p := range payloads {
		items[i] = fmt.Sprintf(`{"queue":%q,"partition":%q,"payload":%s,"transactionId":"tx-%d"}`, s.expand(queue), partition, p, i+1)
	}
	answer := s.do("POST", "/api/v1/push", `{"items":[`+strings.Join(items, ",")+`]}`)
	for i := range payloads {
		if st, _ := lookup(answer, strconv.Itoa(i)+".status"); st != "queued" {
			s.t.Fatalf("setting up: push answered %s", compact(answer))
		}
	}
	pid, _ := lookup(answer, "0.partition_id")
	s.vars["PID"] = pid.(string)
}

// pop pops (path and query as given) and sets $LEASE, $PID and $TX1, $TX2, ... from what it
// delivered; it returns the payloads delivered.
func (s *session) pop(pathAndQuery string) []string {
	s.t.Helper()
	answer := s.do("GET", pathAndQuery, nil)
	msgs, _ := lookup(answer, "messages")
	list, _ := msgs.([]any)
	var out []string
	for i, m := range list {
		tx, _ := lookup(m, "transactionId")
		s.vars["TX"+strconv.Itoa(i+1)] = tx.(string)
		pid, _ := lookup(m, "partitionId")
		s.vars["PID"] = pid.(string)
		lease, _ := lookup(m, "leaseId")
		s.vars["LEASE"] = lease.(string)
		data, _ := lookup(m, "data")
		out = append(out, compact(data))
	}
	return out
}

// stored reads every message of queue through a consumer group made up for it, so the queue's
// own groups are left as they are; it returns the payloads in delivery order.
func (s *session) stored(queue string) []string {
	s.t.Helper()
	s.fresh++
	q := url.Values{"consumerGroup": {"reader-" + strconv.Itoa(s.fresh)}, "batch": {"1000"}, "autoAck": {"true"},
		"partitions": {"100"}, "wait": {"false"}}
	var out []string
	for {
		answer := s.do("GET", "/api/v1/pop/queue/"+url.PathEscape(s.expand(queue))+"?"+q.Encode(), nil)
		msgs, _ := lookup(answer, "messages")
		list, _ := msgs.([]any)
		if len(list) == 0 {
			return out
		}
		for _, m := range list {
			data, _ := lookup(m, "data")
			out = append(out, compact(data))
		}
	}
}

// expect fails unless got equals want, element by element.
func (s *session) expect(what string, got []string, want ...string) {
	s.t.Helper()
	if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		s.t.Fatalf("%s: %q, want %q", what, got, want)
	}
}

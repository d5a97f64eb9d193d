package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"queen/server/servertest"
)

// parked reads the broker's parked-pop gauge for queue.
func parked(t *testing.T, c *servertest.Client, queue string) int {
	t.Helper()
	_, body := c.Do("GET", "/metrics/prometheus", nil)
	m := regexp.MustCompile(`queen_queue_parked_consumers\{queue="` + regexp.QuoteMeta(queue) + `"\} (\d+)`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

type popOutcome struct {
	resp popResponse
	at   time.Time
}

func popAsync(t *testing.T, c *servertest.Client, path string) <-chan popOutcome {
	ch := make(chan popOutcome, 1)
	go func() {
		var out popResponse
		status, body := c.Do("GET", path, nil)
		if status != 200 || json.Unmarshal(body, &out) != nil {
			t.Errorf("GET %s: %d %s", path, status, body)
		}
		ch <- popOutcome{out, time.Now()}
	}()
	return ch
}

// The broker's own re-check of the parked pop is set beyond the pop's timeout, and a timeout
// answers with no messages: a pop that returns the pushed messages was woken by the push.
func TestParkedPopIsWokenByPush(t *testing.T) {
	t.Parallel()
	c := startBroker(t, rechecksEvery(10*time.Minute))
	createQueue(t, c, "lp") // with its Default partition
	done := popAsync(t, c, "/api/v1/pop/queue/lp/partition/Default?wait=true&batch=5&timeout=20000")
	waitFor(t, "the pop to park", func() bool {
		select {
		case r := <-done:
			t.Fatalf("pop answered before any push: %+v", r.resp)
		default:
		}
		return parked(t, c, "lp") == 1
	})
	pushed := time.Now()
	push(t, c, item{"queue": "lp", "payload": map[string]any{"late": 1}}, item{"queue": "lp", "payload": map[string]any{"late": 2}})
	answered := time.Now()
	r := <-done
	if got := payloads(r.resp.Messages); len(got) != 2 || got[0] != `{"late":1}` || got[1] != `{"late":2}` {
		t.Fatalf("woken pop: %+v, want the two pushed messages", r.resp)
	}
	t.Logf("wake latency: %v from the push request, %v from its answer", r.at.Sub(pushed), r.at.Sub(answered))
	waitFor(t, "the gauge to drop", func() bool { return parked(t, c, "lp") == 0 })
}

// A long-poll on an empty queue waits for its timeout and answers with the timeout's shape: the
// actor produces it only once the pop's deadline has passed (a pop that does not wait answers
// the same empty queue otherwise, as the test checks).
func TestLongPollOnEmptyQueueAnswersAtTimeout(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	// answer pops and returns the answer with its keys sorted.
	answer := func(query string) string {
		var out map[string]any
		c.JSON("GET", "/api/v1/pop/queue/emptyq?"+query, nil, 200, &out)
		b, _ := json.Marshal(out)
		return string(b)
	}
	// The pop must wait: it parks (the gauge shows it) before it is answered.
	createQueue(t, c, "emptyq")
	answered := make(chan string, 1)
	go func() { answered <- answer("wait=true&batch=5&timeout=1500") }()
	waitFor(t, "the long-poll to park", func() bool {
		select {
		case a := <-answered:
			t.Fatalf("the long-poll was answered before it parked: %s", a)
		default:
		}
		return parked(t, c, "emptyq") == 1
	})
	got := <-answered
	const want = `{"consumerGroup":"__QUEUE_MODE__","leaseId":null,"messages":[],"partition":"","partitionId":null,"queue":"emptyq","success":true}`
	if got != want {
		t.Fatalf("timeout body %s, want %s", got, want)
	}
	if got := answer("batch=5"); got == want {
		t.Fatalf("a pop that does not wait answers like a timed-out long-poll: %s", got)
	}
}

func TestDisconnectedLongPollDoesNotTakeMessages(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	createQueue(t, c, "gone")
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", c.Base+"/api/v1/pop/queue/gone?wait=true&timeout=30000", nil)
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		errc <- err
	}()
	waitFor(t, "the pop to park", func() bool { return parked(t, c, "gone") == 1 })
	cancel() // the client goes away
	<-errc
	waitFor(t, "the broker to drop the abandoned pop", func() bool { return parked(t, c, "gone") == 0 })

	push(t, c, item{"queue": "gone", "payload": "kept"})
	p := pop(t, c, "/api/v1/pop/queue/gone", "batch", "5")
	if len(p.Messages) != 1 || string(p.Messages[0].Data) != `"kept"` {
		t.Fatalf("the message must still be available to a live consumer: %+v", p)
	}
}

func TestShutdownAnswersParkedPops(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	createQueue(t, c, "bye")
	// The pop's timeout is far beyond the shutdown's: the HTTP server waits for the requests in
	// flight, so a shutdown that left the pop parked would fail with its context's deadline.
	done := popAsync(t, c, "/api/v1/pop/queue/bye?wait=true&timeout=600000")
	waitFor(t, "the pop to park", func() bool { return parked(t, c, "bye") == 1 })
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Broker.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with a parked pop: %v", err)
	}
	r := <-done
	if !r.resp.Success || len(r.resp.Messages) != 0 || r.resp.Queue != "bye" {
		t.Fatalf("parked pop at shutdown: %+v", r.resp)
	}
	t.Logf("shutdown took %v", time.Since(start))
}

package server_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"queen/config"
	"queen/server/servertest"
)

// counter reads one unlabelled series of the broker's metrics (0 when absent).
func counter(t *testing.T, c *servertest.Client, name string) int {
	t.Helper()
	_, body := c.Do("GET", "/metrics/prometheus", nil)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\d+)$`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// recheckBound is the most re-checks a single parked pop can make in elapsed on the default
// schedule (every interval is at least POP_WAIT_INITIAL_INTERVAL_MS), plus its first pop.
func recheckBound(elapsed time.Duration) int {
	const initial = 100 * time.Millisecond
	return int(elapsed/initial) + 2
}

// TestParkedPopsShareOneRecheck parks 2,000 equivalent long-polls on one queue: the database
// must see the re-checks of about one waiter, not of 2,000, and /health must stay up.
func TestParkedPopsShareOneRecheck(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	const waiters = 2000
	path := "/api/v1/pop/queue/crowd?consumerGroup=workers&wait=true&timeout=60000"
	createQueue(t, c, "crowd")
	results := make([]<-chan popOutcome, waiters)
	for i := range results {
		results[i] = popAsync(t, c, path)
	}
	waitFor(t, "every pop to park", func() bool { return parked(t, c, "crowd") == waiters })

	before, start := counter(t, c, "queen_pop_queries_total"), time.Now()
	for time.Since(start) < 3*time.Second {
		if status, body := c.Do("GET", "/health", nil); status != 200 {
			t.Fatalf("/health answered %d while the pops were parked: %s", status, body)
		}
	}
	queries, elapsed := counter(t, c, "queen_pop_queries_total")-before, time.Since(start)
	if limit := 5 * recheckBound(elapsed); queries > limit {
		t.Fatalf("%d parked pops ran %d database pops in %v; one waiter's schedule allows %d, the limit is %d",
			waiters, queries, elapsed, recheckBound(elapsed), limit)
	}
	t.Logf("%d parked pops ran %d database pops in %v", waiters, queries, elapsed)

	push(t, c, item{"queue": "crowd", "payload": map[string]any{"for": "one"}})
	waitFor(t, "one pop to be answered", func() bool { return parked(t, c, "crowd") == waiters-1 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Broker.Shutdown(ctx); err != nil { // answers the others, empty
		t.Fatal(err)
	}
	var got []message
	for _, ch := range results {
		got = append(got, (<-ch).resp.Messages...)
	}
	if len(got) != 1 || string(got[0].Data) != `{"for":"one"}` {
		t.Fatalf("the push reached %d pops: %v", len(got), payloads(got))
	}
}

// answeredUnparked waits for the answer of a long-poll, failing the test if more than limit
// pops park on queue meanwhile.
func answeredUnparked(t *testing.T, c *servertest.Client, done <-chan popOutcome, queue string, limit int) popOutcome {
	t.Helper()
	var r popOutcome
	waitFor(t, "the long-poll to be answered", func() bool {
		if n := parked(t, c, queue); n > limit {
			t.Fatalf("%d pops parked on %s, the cap allows %d", n, queue, limit)
		}
		select {
		case r = <-done:
			return true
		default:
			return false
		}
	})
	return r
}

// TestParkedPopCapPerQueue: past QUEEN_MAX_PARKED_PER_QUEUE a long-poll is answered at once
// with the timeout shape, and the parked ones stay parked.
func TestParkedPopCapPerQueue(t *testing.T) {
	t.Parallel()
	c := startBroker(t, func(c *config.Config) { c.MaxParkedPerQueue = 10 })
	path := "/api/v1/pop/queue/capped?wait=true&timeout=60000"
	createQueue(t, c, "capped")
	for range 10 {
		popAsync(t, c, path)
	}
	waitFor(t, "ten pops to park", func() bool { return parked(t, c, "capped") == 10 })
	r := answeredUnparked(t, c, popAsync(t, c, path), "capped", 10)
	if !r.resp.Success || r.resp.Messages == nil || len(r.resp.Messages) != 0 || r.resp.Queue != "capped" ||
		r.resp.ConsumerGroup != "__QUEUE_MODE__" {
		t.Fatalf("refused long-poll: %+v, want the empty long-poll answer", r.resp)
	}
	if n := parked(t, c, "capped"); n != 10 {
		t.Fatalf("%d pops parked after the refusal, want the 10 still there", n)
	}
	if n := counter(t, c, "queen_pop_parked_refused_total"); n != 1 {
		t.Fatalf("queen_pop_parked_refused_total = %d, want 1", n)
	}
}

// TestParkedPopCapPerBroker: QUEEN_MAX_PARKED counts the parked pops of every queue.
func TestParkedPopCapPerBroker(t *testing.T) {
	t.Parallel()
	c := startBroker(t, func(c *config.Config) { c.MaxParked = 2 })
	createQueue(t, c, "first", "second", "third")
	popAsync(t, c, "/api/v1/pop/queue/first?wait=true&timeout=60000")
	popAsync(t, c, "/api/v1/pop/queue/second?wait=true&timeout=60000")
	waitFor(t, "two pops to park", func() bool { return parked(t, c, "first") == 1 && parked(t, c, "second") == 1 })
	r := answeredUnparked(t, c, popAsync(t, c, "/api/v1/pop/queue/third?wait=true&timeout=60000"), "third", 0)
	if !r.resp.Success || len(r.resp.Messages) != 0 || r.resp.Queue != "third" {
		t.Fatalf("refused long-poll: %+v", r.resp)
	}
	if parked(t, c, "first") != 1 || parked(t, c, "second") != 1 || parked(t, c, "third") != 0 {
		t.Fatal("the parked pops must stay, and the third must not park")
	}
}

// TestNamespaceLongPoll: a pop by namespace parks on its queues' actors; when its client goes
// away it stops costing database pops; a push to one of its queues answers it.
func TestNamespaceLongPoll(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	for _, q := range []string{"ns-a", "ns-b"} {
		c.JSON("POST", "/api/v1/configure", map[string]any{"queue": q, "namespace": "billing"}, 200, nil)
	}
	const path = "/api/v1/pop?namespace=billing&wait=true&timeout=60000"
	const clients = 20
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range clients {
		req, _ := http.NewRequestWithContext(ctx, "GET", c.Base+path, nil)
		wg.Go(func() {
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	waitFor(t, "the namespace pops to park on both queues", func() bool {
		return parked(t, c, "ns-a") == clients && parked(t, c, "ns-b") == clients
	})
	cancel() // every client goes away
	wg.Wait()
	waitFor(t, "the broker to drop the abandoned pops", func() bool {
		return parked(t, c, "ns-a") == 0 && parked(t, c, "ns-b") == 0
	})

	// While a control long-poll on another queue waits out its timeout, the only database
	// pops are its own.
	before := counter(t, c, "queen_pop_queries_total")
	ctl := <-popAsync(t, c, "/api/v1/pop/queue/control?wait=true&timeout=1500")
	if len(ctl.resp.Messages) != 0 {
		t.Fatalf("control pop: %+v", ctl.resp)
	}
	if n, limit := counter(t, c, "queen_pop_queries_total")-before, recheckBound(1500*time.Millisecond); n > limit {
		t.Fatalf("%d database pops while only the control pop (at most %d) was parked", n, limit)
	}

	done := popAsync(t, c, path)
	waitFor(t, "a namespace pop to park", func() bool { return parked(t, c, "ns-a") == 1 && parked(t, c, "ns-b") == 1 })
	push(t, c, item{"queue": "ns-b", "payload": "billed"})
	r := <-done
	if r.resp.Queue != "ns-b" || len(r.resp.Messages) != 1 || string(r.resp.Messages[0].Data) != `"billed"` {
		t.Fatalf("namespace pop woken by a push: %+v", r.resp)
	}
	waitFor(t, "its pop on the other queue to be dropped", func() bool { return parked(t, c, "ns-a") == 0 })
}

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

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
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

func TestParkedPopIsWokenByPush(t *testing.T) {
	t.Parallel()
	c := startBroker(t, nil)
	const timeout = 20 * time.Second
	createQueue(t, c, "lp") // with its Default partition
	start := time.Now()
	done := popAsync(t, c, "/api/v1/pop/queue/lp/partition/Default?wait=true&batch=5&timeout="+strconv.Itoa(int(timeout.Milliseconds())))
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
	if len(r.resp.Messages) != 2 || string(r.resp.Messages[0].Data) != `{"late":1}` {
		t.Fatalf("woken pop: %+v", r.resp)
	}
	if r.at.Sub(start) >= timeout/2 {
		t.Fatalf("the parked pop was answered only after %v, not by the push", r.at.Sub(start))
	}
	t.Logf("wake latency: %v from the push request, %v from its answer", r.at.Sub(pushed), r.at.Sub(answered))
	waitFor(t, "the gauge to drop", func() bool { return parked(t, c, "lp") == 0 })
}

func TestLongPollOnEmptyQueueAnswersAtTimeout(t *testing.T) {
	t.Parallel()
	c := startBroker(t, nil)
	start := time.Now()
	var out map[string]any
	c.JSON("GET", "/api/v1/pop/queue/emptyq?wait=true&batch=5&timeout=1500", nil, 200, &out)
	took := time.Since(start)
	if took < 1500*time.Millisecond || took > 4*time.Second {
		t.Fatalf("answered after %v, want about 1.5 s", took)
	}
	b, _ := json.Marshal(out)
	want := `{"consumerGroup":"__QUEUE_MODE__","leaseId":null,"messages":[],"partition":"","partitionId":null,"queue":"emptyq","success":true}`
	if string(b) != want {
		t.Fatalf("timeout body %s, want %s", b, want)
	}
}

func TestDisconnectedLongPollDoesNotTakeMessages(t *testing.T) {
	t.Parallel()
	c := startBroker(t, nil)
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
	c := startBroker(t, nil)
	createQueue(t, c, "bye")
	done := popAsync(t, c, "/api/v1/pop/queue/bye?wait=true&timeout=60000")
	waitFor(t, "the pop to park", func() bool { return parked(t, c, "bye") == 1 })
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Broker.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if !r.resp.Success || len(r.resp.Messages) != 0 || r.resp.Queue != "bye" {
		t.Fatalf("parked pop at shutdown: %+v", r.resp)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("shutdown took %v", took)
	}
}

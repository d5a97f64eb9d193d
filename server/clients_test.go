package server_test

import (
	"slices"
	"testing"
)

// What the official clients send, as they send it.

// The JS client's .subscriptionMode('from_beginning') sends that value as is; the reference
// reads every value but new and new-only as "all", so such a group starts at the beginning.
func TestSubscriptionModeFromBeginning(t *testing.T) {
	c := startBroker(t)
	push(t, c, item{"queue": "history", "payload": 1}, item{"queue": "history", "payload": 2}, item{"queue": "history", "payload": 3})
	for _, mode := range []string{"from_beginning", "all", "something-else"} {
		var got []string
		for {
			p := pop(t, c, "/api/v1/pop/queue/history", "consumerGroup", "g-"+mode, "subscriptionMode", mode, "batch", "2", "autoAck", "true")
			if len(p.Messages) == 0 {
				break
			}
			got = append(got, payloads(p.Messages)...)
		}
		if !slices.Equal(got, []string{"1", "2", "3"}) {
			t.Fatalf("subscriptionMode=%s read %v, want the whole history in order", mode, got)
		}
	}
	// new still skips history.
	if p := pop(t, c, "/api/v1/pop/queue/history", "consumerGroup", "late", "subscriptionMode", "new"); len(p.Messages) != 0 {
		t.Fatalf("subscriptionMode=new read history: %+v", p)
	}
}

// The JS client's queue(”).create() sends an empty queue name; the reference configures a queue
// of that name. Pushing to or popping from "" stays an error.
func TestConfigureEmptyQueueName(t *testing.T) {
	c := startBroker(t)
	var cfg struct {
		Configured bool   `json:"configured"`
		Queue      string `json:"queue"`
		QueueID    string `json:"queueId"`
	}
	c.JSON("POST", "/api/v1/configure", map[string]any{"queue": "", "namespace": nil, "task": nil, "options": map[string]any{"leaseTime": 60}}, 200, &cfg)
	if !cfg.Configured || cfg.Queue != "" || cfg.QueueID == "" {
		t.Fatalf("configure with an empty name: %+v", cfg)
	}
	if status, body := c.Do("POST", "/api/v1/push", map[string]any{"items": []item{{"queue": "", "payload": 1}}}); status != 400 ||
		string(body) != `{"error":"items[0].queue is required"}` {
		t.Fatalf("push to \"\": %d %s", status, body)
	}
	if status, body := c.Do("POST", "/api/v1/configure", map[string]any{"options": map[string]any{}}); status != 400 ||
		string(body) != `{"error":"queue is required"}` {
		t.Fatalf("configure without a queue: %d %s", status, body)
	}
}

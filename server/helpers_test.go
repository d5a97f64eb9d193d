package server_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"testing"
	"time"

	"queen/config"
	"queen/pg/pgtest"
	"queen/server/servertest"
	"queen/testkit"
)

// startBroker boots a broker on a fresh database.
func startBroker(t *testing.T, opts ...servertest.Option) *servertest.Client {
	t.Helper()
	return servertest.Start(t, pgtest.NewDatabase(t), opts...)
}

// waitFor waits for state a broker shows only from outside (a gauge, a status route), with a
// bound generous for anything one broker does by itself.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, what, cond)
}

type pushResult struct {
	Index         int     `json:"index"`
	MessageID     string  `json:"message_id"`
	PartitionID   *string `json:"partition_id"`
	QueueName     string  `json:"queueName"`
	Status        string  `json:"status"`
	TraceID       *string `json:"trace_id"`
	TransactionID string  `json:"transaction_id"`
	Error         string  `json:"error"`
}

type message struct {
	ConsumerGroup string          `json:"consumerGroup"`
	CreatedAt     string          `json:"createdAt"`
	Data          json.RawMessage `json:"data"`
	ID            string          `json:"id"`
	LeaseID       string          `json:"leaseId"`
	Partition     string          `json:"partition"`
	PartitionID   string          `json:"partitionId"`
	ProducerSub   *string         `json:"producerSub"`
	TraceID       *string         `json:"traceId"`
	TransactionID string          `json:"transactionId"`
}

type popResponse struct {
	ConsumerGroup     string    `json:"consumerGroup"`
	Error             string    `json:"error"`
	LeaseID           *string   `json:"leaseId"`
	Messages          []message `json:"messages"`
	Partition         string    `json:"partition"`
	PartitionID       *string   `json:"partitionId"`
	PartitionsClaimed int       `json:"partitionsClaimed"`
	Queue             string    `json:"queue"`
	Success           bool      `json:"success"`
}

type ackResult struct {
	DLQ           bool    `json:"dlq"`
	Error         *string `json:"error"`
	Index         int     `json:"index"`
	LeaseReleased bool    `json:"leaseReleased"`
	PartitionName *string `json:"partitionName"`
	QueueName     *string `json:"queueName"`
	Success       bool    `json:"success"`
	TransactionID string  `json:"transactionId"`
}

// rechecksEvery sets the re-check schedule of parked pops to one interval: long, it makes sure
// only a wake-up can deliver to them.
func rechecksEvery(d time.Duration) servertest.Option {
	return func(c *config.Config) { c.PopWaitInitialInterval, c.PopWaitMaxInterval = d, d }
}

// drainEvery sets the spool's drain cadence (FILE_BUFFER_FLUSH_MS).
func drainEvery(d time.Duration) servertest.Option {
	return func(c *config.Config) { c.SpoolFlush = d }
}

// createQueue configures queues with their defaults: a broker keeps parked-pop gauges only for
// queues that exist, and tests wait on those gauges.
func createQueue(t testing.TB, c *servertest.Client, names ...string) {
	t.Helper()
	for _, name := range names {
		c.JSON("POST", "/api/v1/configure", map[string]any{"queue": name}, 200, nil)
	}
}

type item map[string]any

func push(t testing.TB, c *servertest.Client, items ...item) []pushResult {
	t.Helper()
	var out []pushResult
	c.JSON("POST", "/api/v1/push", map[string]any{"items": items}, 200, &out)
	if len(out) != len(items) {
		t.Fatalf("push: %d results for %d items", len(out), len(items))
	}
	return out
}

// pop pops with the given query parameters (url.Values-style pairs).
func pop(t testing.TB, c *servertest.Client, path string, kv ...string) popResponse {
	t.Helper()
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	var out popResponse
	c.JSON("GET", path+"?"+q.Encode(), nil, 200, &out)
	return out
}

func ack(t testing.TB, c *servertest.Client, body map[string]any) ackResult {
	t.Helper()
	var out []ackResult
	c.JSON("POST", "/api/v1/ack", body, 200, &out)
	if len(out) != 1 {
		t.Fatalf("ack: want one result, got %d", len(out))
	}
	return out[0]
}

func ackAll(t testing.TB, c *servertest.Client, group string, msgs []message) []ackResult {
	t.Helper()
	acks := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		acks[i] = map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": "completed"}
	}
	var out []ackResult
	c.JSON("POST", "/api/v1/ack/batch", map[string]any{"consumerGroup": group, "acknowledgments": acks}, 200, &out)
	return out
}

// payloads returns the data of msgs as strings, for comparisons.
func payloads(msgs []message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Data)
	}
	return out
}

func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

func fmtJSON(v any) string { b, _ := json.Marshal(v); return fmt.Sprint(string(b)) }

package server_test

import (
	"log/slog"
	"net"
	"os"
	"testing"

	"github.com/valyala/fasthttp"

	"queen/pg/pgtest"
	"queen/server/servertest"
)

var fuzzMethods = []string{"GET", "POST", "DELETE", "PUT", "OPTIONS", "HEAD", "PATCH"}

// FuzzRouter feeds requests to the whole in-process pipeline of a real broker (boundary,
// handlers, PostgreSQL): whatever arrives, the answer is never a 5xx. Long-polls are not
// fuzzed (wait is dropped): they only add waiting.
func FuzzRouter(f *testing.F) {
	seeds := []struct {
		method      uint8
		path, query string
		body        string
	}{
		{1, "/api/v1/push", "", `{"items":[{"queue":"q","partition":"p","transactionId":"t","payload":{"a":1}}]}`},
		{0, "/api/v1/pop/queue/q", "batch=2&consumerGroup=g&autoAck=true", ""},
		{0, "/api/v1/pop/queue/q/partition/p", "subscriptionMode=from_beginning", ""},
		{0, "/api/v1/pop", "namespace=q", ""},
		{1, "/api/v1/ack", "", `{"transactionId":"t","partitionId":"0190f3c1-0000-7000-8000-000000000001","status":"failed","error":"x"}`},
		{1, "/api/v1/ack/batch", "", `{"acknowledgments":[{"transactionId":"t","partitionId":"0190f3c1-0000-7000-8000-000000000001"}]}`},
		{1, "/api/v1/transaction", "", `{"operations":[{"type":"push","items":[{"queue":"q","payload":1}]}]}`},
		{1, "/api/v1/configure", "", `{"queue":"q","namespace":"n","task":"t","options":{"leaseTime":5}}`},
		{1, "/api/v1/lease/0190f3c1-0000-7000-8000-000000000002/extend", "", `{"seconds":5}`},
		{1, "/api/v1/traces", "", `{"transactionId":"t","partitionId":"0190f3c1-0000-7000-8000-000000000001","data":{}}`},
		{0, "/api/v1/traces/by-name/n", "limit=5", ""},
		{0, "/api/v1/messages", "queue=q&status=pending", ""},
		{0, "/api/v1/dlq", "queue=q&from=2024-01-01T00:00:00Z", ""},
		{0, "/api/v1/consumer-groups/g", "", ""},
		{1, "/api/v1/consumer-groups/g/queues/q/seek", "", `{"toEnd":true}`},
		{2, "/api/v1/resources/queues/q%00", "", ""},
		{0, "/api/v1/resources/queues/%ff", "", ""},
		{0, "/assets/../x", "", ""},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.query, []byte(s.body))
	}
	// One broker for the whole run: a broker per input would make every input cost a boot.
	broker := servertest.StartLogged(f, pgtest.NewDatabase(f), slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	handle := broker.Broker.Handler()
	f.Fuzz(func(t *testing.T, method uint8, path, query string, body []byte) {
		var req fasthttp.Request
		req.Header.SetMethod(fuzzMethods[int(method)%len(fuzzMethods)])
		req.SetRequestURI("/")
		req.URI().SetPath(path)
		req.URI().SetQueryString(query)
		req.URI().QueryArgs().Del("wait")
		req.SetBody(body)
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, nil)
		handle(&ctx)
		if status := ctx.Response.StatusCode(); status >= 500 {
			t.Fatalf("%s %q ? %q body %q: %d %s", req.Header.Method(), path, query, body, status, ctx.Response.Body())
		}
	})
}

package conformance_test

import (
	"encoding/json"
	"regexp"
	"sort"
	"strings"
	"testing"

	"queen/pg/pgtest"
	"queen/server/servertest"
)

// capture is one exchange captured from the reference server (0.15.1) on a fresh database, in
// the order it was made: the request as sent, and the status and answer the reference gave.
// The replay sends the same requests in the same order and compares the answers shape for
// shape: the same keys, the same values, except that ids and times only have to be ids and
// times. An id the broker gave stands in for the reference's from then on, so later requests
// refer to what this broker answered (the lease of its pop, the id of its partition).
type capture struct {
	name, method, path string
	body               string
	status             int
	answer             string
	// differs lists what this broker answers differently on purpose (docs/compat.md):
	// a path of the answer and the value it has here, or absent.
	differs []field
}

var (
	uuidText = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	timeText = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$`)
)

func TestCapturedExchanges(t *testing.T) {
	c := servertest.Start(t, pgtest.NewDatabase(t))
	ids := map[string]string{} // the reference's ids -> this broker's
	for _, x := range captures {
		req := strings.NewReplacer(pairs(ids)...)
		var body any
		if x.body != "" {
			body = req.Replace(x.body)
		}
		status, raw := c.Do(x.method, req.Replace(x.path), body)
		if status != x.status {
			t.Fatalf("%s: status %d, want %d; answer %s", x.name, status, x.status, raw)
		}
		var want, got any
		if err := json.Unmarshal([]byte(x.answer), &want); err != nil {
			t.Fatalf("%s: the captured answer: %v", x.name, err)
		}
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatalf("%s: the answer %q is not JSON", x.name, raw)
		}
		for _, d := range x.differs {
			if d.path == "" { // the whole answer
				want = d.want
				continue
			}
			want = patch(want, strings.Split(d.path, "."), d.want)
		}
		if diff := sameShape(want, got, "", ids); diff != "" {
			t.Fatalf("%s: %s\nreference %s\nbroker    %s", x.name, diff, compact(want), raw)
		}
	}
}

// pairs lists old, new pairs for a strings.Replacer, longest first so no id is cut.
func pairs(ids map[string]string) []string {
	keys := make([]string, 0, len(ids))
	for k := range ids {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
	var out []string
	for _, k := range keys {
		out = append(out, k, ids[k])
	}
	return out
}

// patch sets path of v to value (removes it for absent).
func patch(v any, path []string, value any) any {
	switch node := v.(type) {
	case map[string]any:
		if len(path) == 1 {
			if value == absent {
				delete(node, path[0])
			} else {
				node[path[0]] = value
			}
			return node
		}
		node[path[0]] = patch(node[path[0]], path[1:], value)
	case []any:
		for i := range node {
			if path[0] == "*" || path[0] == itoa(i) {
				if len(path) == 1 {
					node[i] = value
				} else {
					node[i] = patch(node[i], path[1:], value)
				}
			}
		}
	}
	return v
}

// sameShape compares a captured answer with this broker's; "" when they agree.
func sameShape(want, got any, at string, ids map[string]string) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return at + " is not an object"
		}
		for k := range w {
			if _, ok := g[k]; !ok {
				return "no " + join(at, k)
			}
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				return "an extra " + join(at, k)
			}
		}
		for k := range w {
			if d := sameShape(w[k], g[k], join(at, k), ids); d != "" {
				return d
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return at + " is not an array of " + itoa(len(w))
		}
		for i := range w {
			if d := sameShape(w[i], g[i], join(at, itoa(i)), ids); d != "" {
				return d
			}
		}
	case string:
		g, ok := got.(string)
		switch {
		case !ok:
			return at + " is not a string"
		case w == string(aTime):
			if !timeText.MatchString(g) {
				return at + " is not a time"
			}
		case uuidText.MatchString(w):
			if !uuidText.MatchString(g) {
				return at + " is not an id"
			}
			if mine, seen := ids[w]; seen && mine != g {
				return at + " names " + g + ", where this broker named " + mine + " before"
			}
			ids[w] = g
		case timeText.MatchString(w):
			if !timeText.MatchString(g) {
				return at + " is not a time"
			}
		case w != g:
			return at + " is " + compact(g) + ", want " + compact(w)
		}
	default:
		if compact(want) != compact(got) {
			return at + " is " + compact(got) + ", want " + compact(want)
		}
	}
	return ""
}

func join(at, k string) string {
	if at == "" {
		return k
	}
	return at + "." + k
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

var captures = []capture{
	{
		name: "configure queue", method: "POST", path: `/api/v1/configure`,
		body:   `{"queue":"orders","namespace":"billing","task":"invoice","options":{"leaseTime":30,"retryLimit":2,"priority":5,"dlqAfterMaxRetries":true,"retentionSeconds":3600}}`,
		status: 200,
		answer: `{"configured":true,"namespace":"billing","options":{"completedRetentionSeconds":0,"deadLetterQueue":false,"delayedProcessing":0,"dlqAfterMaxRetries":true,"encryptionEnabled":false,"leaseTime":30,"maxSize":0,"maxWaitTimeSeconds":0,"priority":5,"retentionEnabled":false,"retentionSeconds":3600,"retryDelay":1000,"retryLimit":2,"ttl":3600,"windowBuffer":0},"partitionId":"1c6d33d6-7c00-4ef1-b126-aab2b630658f","queue":"orders","queueId":"f8bc8939-dcb0-461d-ab74-21bc367f6425","task":"invoice"}`,
	},
	{
		name: "push 3 items w/ partition + transactionId", method: "POST", path: `/api/v1/push`,
		body:   `{"items":[{"queue":"orders","partition":"p1","payload":{"n":1},"transactionId":"tx-1"},{"queue":"orders","partition":"p1","payload":{"n":2},"transactionId":"tx-2","traceId":"11111111-2222-3333-4444-555555555555"},{"queue":"orders","partition":"p2","payload":{"n":3}}]}`,
		status: 200,
		answer: `[{"index":0,"message_id":"01a22895-3166-7000-84dd-108846d942db","partition_id":"cbb8dc0e-77f4-4d18-8ff7-a4d3ea4ea202","queueName":"orders","status":"queued","trace_id":null,"transaction_id":"tx-1"},{"index":1,"message_id":"01a22895-3166-7001-85c2-ba56295ab2ed","partition_id":"cbb8dc0e-77f4-4d18-8ff7-a4d3ea4ea202","queueName":"orders","status":"queued","trace_id":"11111111-2222-3333-4444-555555555555","transaction_id":"tx-2"},{"index":2,"message_id":"01a22895-3166-7002-b621-d9bb60697fa0","partition_id":"506e4cec-03e5-43ce-aa15-d08e99d5eaf8","queueName":"orders","status":"queued","trace_id":null,"transaction_id":"2446b6cc-6883-433e-b319-8f0aa16baf11"}]`,
	},
	{
		name: "push duplicate transactionId", method: "POST", path: `/api/v1/push`,
		body:   `{"items":[{"queue":"orders","partition":"p1","payload":{"n":1},"transactionId":"tx-1"}]}`,
		status: 200,
		answer: `[{"index":0,"message_id":"01a22895-3166-7000-84dd-108846d942db","queueName":"orders","status":"duplicate","transaction_id":"tx-1"}]`,
	},
	{
		// Which partition a wildcard pop takes is not part of the contract; the reference
		// took p2, and the replay names it so that the exchanges after it stay as captured.
		name: "pop (lease, no autoAck) batch=1", method: "GET", path: `/api/v1/pop/queue/orders/partition/p2?batch=1`,
		body:   ``,
		status: 200,
		answer: `{"consumerGroup":"__QUEUE_MODE__","leaseId":"01a22895-3190-7000-9943-719b6530c540","messages":[{"consumerGroup":"__QUEUE_MODE__","createdAt":"2026-11-29T18:33:15.883670Z","data":{"n":3},"id":"01a22895-3166-7002-b621-d9bb60697fa0","leaseId":"01a22895-3190-7000-9943-719b6530c540","partition":"p2","partitionId":"506e4cec-03e5-43ce-aa15-d08e99d5eaf8","producerSub":null,"traceId":null,"transactionId":"2446b6cc-6883-433e-b319-8f0aa16baf11"}],"partition":"p2","partitionId":"506e4cec-03e5-43ce-aa15-d08e99d5eaf8","partitionsClaimed":1,"queue":"orders","success":true}`,
	},
	{
		name: "ack single (completed, with leaseId)", method: "POST", path: `/api/v1/ack`,
		body:   `{"transactionId":"2446b6cc-6883-433e-b319-8f0aa16baf11","partitionId":"506e4cec-03e5-43ce-aa15-d08e99d5eaf8","leaseId":"01a22895-3190-7000-9943-719b6530c540","status":"completed"}`,
		status: 200,
		answer: `[{"dlq":false,"error":null,"index":0,"leaseReleased":true,"partitionName":"p2","queueName":"orders","success":true,"transactionId":"2446b6cc-6883-433e-b319-8f0aa16baf11"}]`,
	},
	{
		name: "ack same message again", method: "POST", path: `/api/v1/ack`,
		body:   `{"transactionId":"2446b6cc-6883-433e-b319-8f0aa16baf11","partitionId":"506e4cec-03e5-43ce-aa15-d08e99d5eaf8","leaseId":"01a22895-3190-7000-9943-719b6530c540","status":"completed"}`,
		status: 200,
		answer: `[{"dlq":false,"error":"Invalid or expired lease","index":0,"leaseReleased":false,"partitionName":"p2","queueName":"orders","success":false,"transactionId":"2446b6cc-6883-433e-b319-8f0aa16baf11"}]`,
	},
	{
		name: "ack missing partitionId", method: "POST", path: `/api/v1/ack`,
		body:   `{"transactionId":"tx-1"}`,
		status: 400,
		answer: `{"error":"partitionId is required to ensure message uniqueness"}`,
	},
	{
		name: "ack unknown tx", method: "POST", path: `/api/v1/ack`,
		body:   `{"transactionId":"nope","partitionId":"506e4cec-03e5-43ce-aa15-d08e99d5eaf8"}`,
		status: 200,
		answer: `[{"dlq":false,"error":"Message not found","index":0,"leaseReleased":false,"partitionName":"p2","queueName":"orders","success":false,"transactionId":"nope"}]`,
	},
	{
		name: "pop batch=10 (partition p1 gets leased)", method: "GET", path: `/api/v1/pop/queue/orders?batch=10`,
		body:   ``,
		status: 200,
		answer: `{"consumerGroup":"__QUEUE_MODE__","leaseId":"01a22895-3e93-7000-83a7-68ece059fce8","messages":[{"consumerGroup":"__QUEUE_MODE__","createdAt":"2026-11-29T18:33:15.883670Z","data":{"n":1},"id":"01a22895-3166-7000-84dd-108846d942db","leaseId":"01a22895-3e93-7000-83a7-68ece059fce8","partition":"p1","partitionId":"cbb8dc0e-77f4-4d18-8ff7-a4d3ea4ea202","producerSub":null,"traceId":null,"transactionId":"tx-1"},{"consumerGroup":"__QUEUE_MODE__","createdAt":"2026-11-29T18:33:15.883670Z","data":{"n":2},"id":"01a22895-3166-7001-85c2-ba56295ab2ed","leaseId":"01a22895-3e93-7000-83a7-68ece059fce8","partition":"p1","partitionId":"cbb8dc0e-77f4-4d18-8ff7-a4d3ea4ea202","producerSub":null,"traceId":"11111111-2222-3333-4444-555555555555","transactionId":"tx-2"}],"partition":"p1","partitionId":"cbb8dc0e-77f4-4d18-8ff7-a4d3ea4ea202","partitionsClaimed":1,"queue":"orders","success":true}`,
	},
	{
		name: "ack/batch (one completed, one failed)", method: "POST", path: `/api/v1/ack/batch`,
		body:   `{"acknowledgments":[{"transactionId":"tx-1","partitionId":"cbb8dc0e-77f4-4d18-8ff7-a4d3ea4ea202","leaseId":"01a22895-3e93-7000-83a7-68ece059fce8","status":"completed"},{"transactionId":"tx-2","partitionId":"cbb8dc0e-77f4-4d18-8ff7-a4d3ea4ea202","leaseId":"01a22895-3e93-7000-83a7-68ece059fce8","status":"failed","error":"boom"}]}`,
		status: 200,
		answer: `[{"dlq":false,"error":null,"index":0,"leaseReleased":false,"partitionName":"p1","queueName":"orders","success":true,"transactionId":"tx-1"},{"dlq":false,"error":null,"index":1,"leaseReleased":true,"partitionName":"p1","queueName":"orders","success":true,"transactionId":"tx-2"}]`,
	},
	{
		name: "pop immediately after failed ack", method: "GET", path: `/api/v1/pop/queue/orders?batch=10`,
		body:   ``,
		status: 200,
		answer: `{"consumerGroup":"__QUEUE_MODE__","leaseId":"01a22895-4814-7000-b3e3-4494ff776790","messages":[{"consumerGroup":"__QUEUE_MODE__","createdAt":"2026-11-29T18:33:15.883670Z","data":{"n":2},"id":"01a22895-3166-7001-85c2-ba56295ab2ed","leaseId":"01a22895-4814-7000-b3e3-4494ff776790","partition":"p1","partitionId":"cbb8dc0e-77f4-4d18-8ff7-a4d3ea4ea202","producerSub":null,"traceId":"11111111-2222-3333-4444-555555555555","transactionId":"tx-2"}],"partition":"p1","partitionId":"cbb8dc0e-77f4-4d18-8ff7-a4d3ea4ea202","partitionsClaimed":1,"queue":"orders","success":true}`,
	},
	{
		name: "pop after retryDelay (redelivery of failed tx-2)", method: "GET", path: `/api/v1/pop/queue/orders?batch=10`,
		body:   ``,
		status: 200,
		answer: `{"error":"no_available_partition","messages":[],"success":false}`,
	},
	{
		name: "lease extend", method: "POST", path: `/api/v1/lease/01a22895-4814-7000-b3e3-4494ff776790/extend`,
		body:   `{"seconds":60}`,
		status: 200,
		answer: `[{"error":null,"expiresAt":"2026-11-29T18:34:24.948Z","index":0,"leaseId":"01a22895-4814-7000-b3e3-4494ff776790","success":true}]`,
	},
	{
		name: "lease extend unknown lease", method: "POST", path: `/api/v1/lease/00000000-0000-0000-0000-000000000000/extend`,
		body:   `{"seconds":60}`,
		status: 200,
		answer: `[{"error":"Lease not found","expiresAt":null,"index":0,"leaseId":"00000000-0000-0000-0000-000000000000","success":false}]`,
	},
	{
		name: "ack failed #2", method: "POST", path: `/api/v1/ack`,
		body:   `{"transactionId":"tx-2","partitionId":"cbb8dc0e-77f4-4d18-8ff7-a4d3ea4ea202","leaseId":"01a22895-4814-7000-b3e3-4494ff776790","status":"failed","error":"boom2"}`,
		status: 200,
		answer: `[{"dlq":false,"error":null,"index":0,"leaseReleased":true,"partitionName":"p1","queueName":"orders","success":true,"transactionId":"tx-2"}]`,
	},
	{
		name: "pop after 2nd failure", method: "GET", path: `/api/v1/pop/queue/orders?batch=10`,
		body:   ``,
		status: 200,
		answer: `{"consumerGroup":"__QUEUE_MODE__","leaseId":"01a22895-5c7d-7000-871b-9f29c8279291","messages":[{"consumerGroup":"__QUEUE_MODE__","createdAt":"2026-11-29T18:33:15.883670Z","data":{"n":2},"id":"01a22895-3166-7001-85c2-ba56295ab2ed","leaseId":"01a22895-5c7d-7000-871b-9f29c8279291","partition":"p1","partitionId":"cbb8dc0e-77f4-4d18-8ff7-a4d3ea4ea202","producerSub":null,"traceId":"11111111-2222-3333-4444-555555555555","transactionId":"tx-2"}],"partition":"p1","partitionId":"cbb8dc0e-77f4-4d18-8ff7-a4d3ea4ea202","partitionsClaimed":1,"queue":"orders","success":true}`,
	},
	{
		name: "ack failed #3 (retryLimit=2 -> DLQ?)", method: "POST", path: `/api/v1/ack`,
		body:   `{"transactionId":"tx-2","partitionId":"cbb8dc0e-77f4-4d18-8ff7-a4d3ea4ea202","leaseId":"01a22895-5c7d-7000-871b-9f29c8279291","status":"failed","error":"boom3"}`,
		status: 200,
		answer: `[{"dlq":true,"error":null,"index":0,"leaseReleased":false,"partitionName":"p1","queueName":"orders","success":true,"transactionId":"tx-2"}]`,
		// The dead-lettered message ended the leased batch: the lease is released, and said so.
		differs: []field{{"0.leaseReleased", true}},
	},
	{
		name: "pop after 3rd failure", method: "GET", path: `/api/v1/pop/queue/orders?batch=10`,
		body:   ``,
		status: 200,
		answer: `{"error":"no_available_partition","messages":[],"success":false}`,
	},
	{
		name: "dlq list", method: "GET", path: `/api/v1/dlq?queue=orders`,
		body:   ``,
		status: 200,
		answer: `{"messages":[{"consumerGroup":"__QUEUE_MODE__","createdAt":"2026-11-29T18:33:15.883Z","data":{"n":2},"errorMessage":"boom3","failedAt":"2026-11-29T18:33:27.027Z","id":"01a22895-3166-7001-85c2-ba56295ab2ed","partition":"p1","partitionId":"cbb8dc0e-77f4-4d18-8ff7-a4d3ea4ea202","producerSub":null,"queue":"orders","retryCount":2,"transactionId":"tx-2"}],"pagination":{"limit":100,"offset":0}}`,
		// Go's DLQ builder reads total; the reference had none.
		differs: []field{{"total", 1.0}},
	},
	{
		name: "pop wait=false on nonexistent queue", method: "GET", path: `/api/v1/pop/queue/nosuchq?batch=5`,
		body:   ``,
		status: 200,
		answer: `{"error":"no_available_partition","messages":[],"success":false}`,
	},
	{
		name: "pop specific partition nonexistent", method: "GET", path: `/api/v1/pop/queue/orders/partition/zzz?batch=5`,
		body:   ``,
		status: 200,
		answer: `{"error":"partition_not_found","messages":[],"success":false}`,
	},
	{
		name: "push 3 to events", method: "POST", path: `/api/v1/push`,
		body:   `{"items":[{"queue":"events","partition":"e1","payload":{"k":1}},{"queue":"events","partition":"e1","payload":{"k":2}},{"queue":"events","partition":"e2","payload":{"k":3}}]}`,
		status: 200,
		answer: `[{"index":0,"message_id":"01a22895-91cb-7000-bece-18ef5f1bdd3e","partition_id":"921be0e8-7b12-4de1-8046-d3177d540f92","queueName":"events","status":"queued","trace_id":null,"transaction_id":"8ab57f22-ee64-4c3e-939e-65455caddbe8"},{"index":1,"message_id":"01a22895-91cb-7001-9564-db0b102451ee","partition_id":"921be0e8-7b12-4de1-8046-d3177d540f92","queueName":"events","status":"queued","trace_id":null,"transaction_id":"3ad13d47-ebde-4c08-9b09-f8456e5d359e"},{"index":2,"message_id":"01a22895-91cb-7002-986c-bc3dad24e5a0","partition_id":"b718fe2c-987c-442b-a382-2f3f71b21590","queueName":"events","status":"queued","trace_id":null,"transaction_id":"c065dc6a-69dd-4e1b-84d3-8be3dc3e6384"}]`,
	},
	{
		name: "CG pop cg=groupA batch=10 autoAck", method: "GET", path: `/api/v1/pop/queue/events?consumerGroup=groupA&batch=10&autoAck=true`,
		body:   ``,
		status: 200,
		answer: `{"consumerGroup":"groupA","leaseId":"","messages":[{"consumerGroup":"groupA","createdAt":"2026-11-29T18:33:40.560952Z","data":{"k":1},"id":"01a22895-91cb-7000-bece-18ef5f1bdd3e","leaseId":"","partition":"e1","partitionId":"921be0e8-7b12-4de1-8046-d3177d540f92","producerSub":null,"traceId":null,"transactionId":"8ab57f22-ee64-4c3e-939e-65455caddbe8"},{"consumerGroup":"groupA","createdAt":"2026-11-29T18:33:40.560952Z","data":{"k":2},"id":"01a22895-91cb-7001-9564-db0b102451ee","leaseId":"","partition":"e1","partitionId":"921be0e8-7b12-4de1-8046-d3177d540f92","producerSub":null,"traceId":null,"transactionId":"3ad13d47-ebde-4c08-9b09-f8456e5d359e"}],"partition":"e1","partitionId":"921be0e8-7b12-4de1-8046-d3177d540f92","partitionsClaimed":1,"queue":"events","success":true}`,
	},
	{
		name: "CG pop cg=groupB batch=10 (lease)", method: "GET", path: `/api/v1/pop/queue/events?consumerGroup=groupB&batch=10`,
		body:   ``,
		status: 200,
		answer: `{"consumerGroup":"groupB","leaseId":"01a22895-91f5-7000-9eb1-5094522887e7","messages":[{"consumerGroup":"groupB","createdAt":"2026-11-29T18:33:40.560952Z","data":{"k":1},"id":"01a22895-91cb-7000-bece-18ef5f1bdd3e","leaseId":"01a22895-91f5-7000-9eb1-5094522887e7","partition":"e1","partitionId":"921be0e8-7b12-4de1-8046-d3177d540f92","producerSub":null,"traceId":null,"transactionId":"8ab57f22-ee64-4c3e-939e-65455caddbe8"},{"consumerGroup":"groupB","createdAt":"2026-11-29T18:33:40.560952Z","data":{"k":2},"id":"01a22895-91cb-7001-9564-db0b102451ee","leaseId":"01a22895-91f5-7000-9eb1-5094522887e7","partition":"e1","partitionId":"921be0e8-7b12-4de1-8046-d3177d540f92","producerSub":null,"traceId":null,"transactionId":"3ad13d47-ebde-4c08-9b09-f8456e5d359e"}],"partition":"e1","partitionId":"921be0e8-7b12-4de1-8046-d3177d540f92","partitionsClaimed":1,"queue":"events","success":true}`,
	},
	{
		name: "CG pop cg=groupA again", method: "GET", path: `/api/v1/pop/queue/events?consumerGroup=groupA&batch=10&autoAck=true`,
		body:   ``,
		status: 200,
		answer: `{"consumerGroup":"groupA","leaseId":"","messages":[{"consumerGroup":"groupA","createdAt":"2026-11-29T18:33:40.560952Z","data":{"k":3},"id":"01a22895-91cb-7002-986c-bc3dad24e5a0","leaseId":"","partition":"e2","partitionId":"b718fe2c-987c-442b-a382-2f3f71b21590","producerSub":null,"traceId":null,"transactionId":"c065dc6a-69dd-4e1b-84d3-8be3dc3e6384"}],"partition":"e2","partitionId":"b718fe2c-987c-442b-a382-2f3f71b21590","partitionsClaimed":1,"queue":"events","success":true}`,
	},
	{
		name: "CG pop cg=groupNew subscriptionMode=new", method: "GET", path: `/api/v1/pop/queue/events?consumerGroup=groupNew&batch=10&subscriptionMode=new`,
		body:   ``,
		status: 200,
		answer: `{"consumerGroup":"groupNew","leaseId":"01a22895-921f-7000-bd4f-cca9bc06276a","messages":[],"partition":"e1","partitionId":"921be0e8-7b12-4de1-8046-d3177d540f92","partitionsClaimed":1,"queue":"events","success":true}`,
		// A pop that finds nothing to deliver leases nothing, as any empty pop.
		differs: []field{{"", map[string]any{"error": "no_available_partition", "messages": []any{}, "success": false}}},
	},
	{
		name: "queue-mode pop on same queue (independent of CGs)", method: "GET", path: `/api/v1/pop/queue/events?batch=10&autoAck=true`,
		body:   ``,
		status: 200,
		answer: `{"consumerGroup":"__QUEUE_MODE__","leaseId":"","messages":[{"consumerGroup":"__QUEUE_MODE__","createdAt":"2026-11-29T18:33:40.560952Z","data":{"k":1},"id":"01a22895-91cb-7000-bece-18ef5f1bdd3e","leaseId":"","partition":"e1","partitionId":"921be0e8-7b12-4de1-8046-d3177d540f92","producerSub":null,"traceId":null,"transactionId":"8ab57f22-ee64-4c3e-939e-65455caddbe8"},{"consumerGroup":"__QUEUE_MODE__","createdAt":"2026-11-29T18:33:40.560952Z","data":{"k":2},"id":"01a22895-91cb-7001-9564-db0b102451ee","leaseId":"","partition":"e1","partitionId":"921be0e8-7b12-4de1-8046-d3177d540f92","producerSub":null,"traceId":null,"transactionId":"3ad13d47-ebde-4c08-9b09-f8456e5d359e"}],"partition":"e1","partitionId":"921be0e8-7b12-4de1-8046-d3177d540f92","partitionsClaimed":1,"queue":"events","success":true}`,
	},
	{
		name: "CG pop partitions=2 (multi-partition claim) groupC", method: "GET", path: `/api/v1/pop/queue/events?consumerGroup=groupC&batch=10&partitions=2&autoAck=true`,
		body:   ``,
		status: 200,
		answer: `{"consumerGroup":"groupC","leaseId":"","messages":[{"consumerGroup":"groupC","createdAt":"2026-11-29T18:33:40.560952Z","data":{"k":1},"id":"01a22895-91cb-7000-bece-18ef5f1bdd3e","leaseId":"","partition":"e1","partitionId":"921be0e8-7b12-4de1-8046-d3177d540f92","producerSub":null,"traceId":null,"transactionId":"8ab57f22-ee64-4c3e-939e-65455caddbe8"},{"consumerGroup":"groupC","createdAt":"2026-11-29T18:33:40.560952Z","data":{"k":2},"id":"01a22895-91cb-7001-9564-db0b102451ee","leaseId":"","partition":"e1","partitionId":"921be0e8-7b12-4de1-8046-d3177d540f92","producerSub":null,"traceId":null,"transactionId":"3ad13d47-ebde-4c08-9b09-f8456e5d359e"},{"consumerGroup":"groupC","createdAt":"2026-11-29T18:33:40.560952Z","data":{"k":3},"id":"01a22895-91cb-7002-986c-bc3dad24e5a0","leaseId":"","partition":"e2","partitionId":"b718fe2c-987c-442b-a382-2f3f71b21590","producerSub":null,"traceId":null,"transactionId":"c065dc6a-69dd-4e1b-84d3-8be3dc3e6384"}],"partition":"e1","partitionId":"921be0e8-7b12-4de1-8046-d3177d540f92","partitionsClaimed":2,"queue":"events","success":true}`,
	},
	{
		name: "ack/batch with consumerGroup=groupB", method: "POST", path: `/api/v1/ack/batch`,
		body:   `{"consumerGroup":"groupB","acknowledgments":[{"transactionId":"8ab57f22-ee64-4c3e-939e-65455caddbe8","partitionId":"921be0e8-7b12-4de1-8046-d3177d540f92","leaseId":"01a22895-91f5-7000-9eb1-5094522887e7","status":"completed"},{"transactionId":"3ad13d47-ebde-4c08-9b09-f8456e5d359e","partitionId":"921be0e8-7b12-4de1-8046-d3177d540f92","leaseId":"01a22895-91f5-7000-9eb1-5094522887e7","status":"completed"}]}`,
		status: 200,
		answer: `[{"dlq":false,"error":null,"index":0,"leaseReleased":false,"partitionName":"e1","queueName":"events","success":true,"transactionId":"8ab57f22-ee64-4c3e-939e-65455caddbe8"},{"dlq":false,"error":null,"index":1,"leaseReleased":true,"partitionName":"e1","queueName":"events","success":true,"transactionId":"3ad13d47-ebde-4c08-9b09-f8456e5d359e"}]`,
	},
	{
		name: "push for transaction test", method: "POST", path: `/api/v1/push`,
		body:   `{"items":[{"queue":"txsrc","payload":{"step":1},"transactionId":"src-1"}]}`,
		status: 200,
		answer: `[{"index":0,"message_id":"01a22895-9be8-7000-b15d-0c13d8fbe2f8","partition_id":"ca17a188-988a-4ab5-9b65-ebc7107d3c87","queueName":"txsrc","status":"queued","trace_id":null,"transaction_id":"src-1"}]`,
	},
	{
		name: "pop txsrc", method: "GET", path: `/api/v1/pop/queue/txsrc?batch=1`,
		body:   ``,
		status: 200,
		answer: `{"consumerGroup":"__QUEUE_MODE__","leaseId":"01a22895-9bfe-7000-9cd0-628326857f33","messages":[{"consumerGroup":"__QUEUE_MODE__","createdAt":"2026-11-29T18:33:43.149635Z","data":{"step":1},"id":"01a22895-9be8-7000-b15d-0c13d8fbe2f8","leaseId":"01a22895-9bfe-7000-9cd0-628326857f33","partition":"Default","partitionId":"ca17a188-988a-4ab5-9b65-ebc7107d3c87","producerSub":null,"traceId":null,"transactionId":"src-1"}],"partition":"Default","partitionId":"ca17a188-988a-4ab5-9b65-ebc7107d3c87","partitionsClaimed":1,"queue":"txsrc","success":true}`,
	},
	{
		name: "transaction: ack src-1 + push to txdst", method: "POST", path: `/api/v1/transaction`,
		body:   `{"operations":[{"type":"ack","transactionId":"src-1","partitionId":"ca17a188-988a-4ab5-9b65-ebc7107d3c87","leaseId":"01a22895-9bfe-7000-9cd0-628326857f33","status":"completed"},{"type":"push","items":[{"queue":"txdst","partition":"Default","payload":{"processed":true}}]}]}`,
		status: 200,
		answer: `{"results":[{"dlq":false,"error":null,"index":0,"success":true,"transactionId":"src-1","type":"ack"},{"index":1,"messageId":"01a22895-a9da-7000-ad65-4d0cffe8f210","partitionId":"dead02da-1cf5-4060-b2f0-e1e49c80458f","queueName":"txdst","success":true,"transactionId":"9f07e4bd-11c5-49a2-8f27-1a514729fcb5","type":"push"}],"success":true,"transactionId":"1e86cc2a-2ce2-4617-a97a-b69e6ab03770"}`,
		// Transactional pushes de-duplicate by transactionId, and say which they did.
		differs: []field{{"results.1.status", "queued"}},
	},
	{
		name: "transaction: ack already-acked + push (atomic failure?)", method: "POST", path: `/api/v1/transaction`,
		body:   `{"operations":[{"type":"ack","transactionId":"src-1","partitionId":"ca17a188-988a-4ab5-9b65-ebc7107d3c87","status":"completed"},{"type":"push","items":[{"queue":"txdst","payload":{"processed":2}}]}]}`,
		status: 200,
		answer: `{"results":[{"dlq":false,"error":null,"index":0,"success":true,"transactionId":"src-1","type":"ack"},{"index":1,"messageId":"01a22895-a9eb-7000-8c07-119d2949e2bd","partitionId":"dead02da-1cf5-4060-b2f0-e1e49c80458f","queueName":"txdst","success":true,"transactionId":"93b03fe2-27a4-47e4-b1d1-bdb52973d059","type":"push"}],"success":true,"transactionId":"51114abe-f61f-4f4a-9058-cc376eb5230e"}`,
		// Transactional pushes de-duplicate by transactionId, and say which they did.
		differs: []field{{"results.1.status", "queued"}},
	},
	{
		name: "transaction: empty operations", method: "POST", path: `/api/v1/transaction`,
		body:   `{"operations":[]}`,
		status: 400,
		answer: `{"error":"operations array cannot be empty"}`,
	},
	{
		name: "pop txdst (what did transactions push?)", method: "GET", path: `/api/v1/pop/queue/txdst?batch=10&autoAck=true`,
		body:   ``,
		status: 200,
		answer: `{"consumerGroup":"__QUEUE_MODE__","leaseId":"","messages":[{"consumerGroup":"__QUEUE_MODE__","createdAt":"2026-11-29T18:33:46.714307Z","data":{"processed":true},"id":"01a22895-a9da-7000-ad65-4d0cffe8f210","leaseId":"","partition":"Default","partitionId":"dead02da-1cf5-4060-b2f0-e1e49c80458f","producerSub":null,"traceId":null,"transactionId":"9f07e4bd-11c5-49a2-8f27-1a514729fcb5"},{"consumerGroup":"__QUEUE_MODE__","createdAt":"2026-11-29T18:33:46.731208Z","data":{"processed":2},"id":"01a22895-a9eb-7000-8c07-119d2949e2bd","leaseId":"","partition":"Default","partitionId":"dead02da-1cf5-4060-b2f0-e1e49c80458f","producerSub":null,"traceId":null,"transactionId":"93b03fe2-27a4-47e4-b1d1-bdb52973d059"}],"partition":"Default","partitionId":"dead02da-1cf5-4060-b2f0-e1e49c80458f","partitionsClaimed":1,"queue":"txdst","success":true}`,
	},
	{
		name: "push invalid JSON", method: "POST", path: `/api/v1/push`,
		body:   `{"items":[{`,
		status: 400,
		answer: `{"error":"Invalid JSON: [json.exception.parse_error.101] parse error at line 1, column 12: syntax error while parsing object key - unexpected end of input; expected string literal"}`,
		// The parser's own words follow "Invalid JSON: ".
		differs: []field{{"error", "Invalid JSON: unexpected end of JSON input"}},
	},
	{
		name: "push missing items", method: "POST", path: `/api/v1/push`,
		body:   `{"foo":1}`,
		status: 400,
		answer: `{"error":"items array is required"}`,
	},
	{
		name: "push empty items", method: "POST", path: `/api/v1/push`,
		body:   `{"items":[]}`,
		status: 201,
		answer: `[]`,
	},
	{
		name: "push item without queue", method: "POST", path: `/api/v1/push`,
		body:   `{"items":[{"payload":{"a":1}}]}`,
		status: 400,
		answer: `{"error":"Queue must be a string"}`,
		// Errors name the field (docs/compat.md, "Input validation").
		differs: []field{{"error", "items[0].queue is required"}},
	},
	{
		name: "push item without payload", method: "POST", path: `/api/v1/push`,
		body:   `{"items":[{"queue":"nopayload"}]}`,
		status: 200,
		answer: `[{"index":0,"message_id":"01a22895-b579-7000-b6cb-62037f369f58","partition_id":"b009cd47-4f46-431a-8672-e104be4db741","queueName":"nopayload","status":"queued","trace_id":null,"transaction_id":"070d64e1-d6a5-4006-ae19-18b00ab5a943"}]`,
	},
	{
		name: "push payload string", method: "POST", path: `/api/v1/push`,
		body:   `{"items":[{"queue":"strpayload","payload":"just a string"}]}`,
		status: 200,
		answer: `[{"index":0,"message_id":"01a22895-b58d-7000-b27c-02f7fe2cf9af","partition_id":"7a381237-7bff-483e-af38-c5480066b955","queueName":"strpayload","status":"queued","trace_id":null,"transaction_id":"801c0865-9aa1-48e7-99b5-4eb46cd70200"}]`,
	},
	{
		name: "push QoS0 buffered (bufferMs/bufferMax)", method: "POST", path: `/api/v1/push`,
		body:   `{"items":[{"queue":"qos0","payload":{"type":"login"}}],"bufferMs":100,"bufferMax":100}`,
		status: 200,
		answer: `[{"index":0,"message_id":"01a22895-b5a1-7000-97dc-c483dc2094b2","partition_id":"54e361e1-a026-4e39-bb79-8bb66774464f","queueName":"qos0","status":"queued","trace_id":null,"transaction_id":"bc43b577-b1a0-4e35-be30-daaa2791df5d"}]`,
	},
	{
		// The reference answered uWebSockets' HTML page; this broker answers JSON.
		name: "unknown route", method: "GET", path: `/api/v1/nope`,
		body:   ``,
		status: 404,
		answer: `{"code":"no_such_route","error":"Not Found"}`,
	},
	{
		// Documented upstream but never registered there (404); implemented here. Nothing is
		// left to deliver in billing's only queue, orders.
		name: "pop by namespace (documented GET /api/v1/pop)", method: "GET", path: `/api/v1/pop?namespace=billing&batch=10`,
		body:   ``,
		status: 200,
		answer: `{"error":"no_available_partition","messages":[],"success":false}`,
	},
	{
		name: "configure without queue", method: "POST", path: `/api/v1/configure`,
		body:   `{"options":{}}`,
		status: 400,
		answer: `{"error":"queue is required"}`,
	}}

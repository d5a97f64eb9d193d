package conformance_test

import (
	"testing"
)

// The requests below are those the official clients send, as the public notes on the Queen
// clients describe them (queenmq.com): Go (client-go), JavaScript (queen-mq on npm), Python
// (queen-mq on PyPI) and queenctl, which is built on the Go client.

// pushShapes: POST /api/v1/push.
var pushShapes = []exchange{
	{
		name:   "Go push: partition Default and a transactionId on every item",
		method: "POST", path: "/api/v1/push", header: []string{"Content-Type", "application/json", "Accept", "application/json"},
		body: `{"items":[{"queue":"$Q","partition":"Default","payload":{"id":1},"transactionId":"0197f1c2-8a00-7000-8000-000000000001"},` +
			`{"queue":"$Q","partition":"Default","payload":"two","transactionId":"0197f1c2-8a00-7000-8000-000000000002"}]}`,
		status: 200,
		// Go reads each item's status and error by position.
		reads: []field{{"0.status", "queued"}, {"0.error", absent}, {"1.status", "queued"}, {"1.error", absent}},
		then: func(s *session, _ any) {
			s.expect("stored", s.stored("$Q"), `{"id":1}`, `"two"`)
		},
	},
	{
		name:   "JS push: a key of the caller's, a version-4 traceId, a named partition",
		method: "POST", path: "/api/v1/push",
		body: `{"items":[{"queue":"$Q","partition":"Default","payload":{"id":1},"transactionId":"0197f1c2-8a00-7000-8000-000000000003"},` +
			`{"queue":"$Q","partition":"cust-42","payload":{"id":2},"transactionId":"my-key-2","traceId":"5f0c2d4e-1a2b-4c3d-8e9f-0a1b2c3d4e5f"}]}`,
		status: 200,
		reads:  []field{{"0.status", "queued"}, {"1.status", "queued"}, {"1.trace_id", "5f0c2d4e-1a2b-4c3d-8e9f-0a1b2c3d4e5f"}},
		then: func(s *session, _ any) {
			s.expect("Default", s.pop("/api/v1/pop/queue/$Q?batch=10&autoAck=true&wait=false"), `{"id":1}`)
			s.expect("cust-42", s.pop("/api/v1/pop/queue/$Q/partition/cust-42?batch=10&autoAck=true&wait=false"), `{"id":2}`)
		},
	},
	{
		name:   "a push sent again (a client's retry) answers duplicate in request order and stores nothing",
		given:  func(s *session) { s.push("$Q", "Default", `{"n":1}`, `{"n":2}`) },
		method: "POST", path: "/api/v1/push",
		body:   `{"items":[{"queue":"$Q","partition":"Default","payload":{"n":1},"transactionId":"tx-1"},{"queue":"$Q","partition":"Default","payload":{"n":2},"transactionId":"tx-2"}]}`,
		status: 200,
		reads:  []field{{"0.status", "duplicate"}, {"1.status", "duplicate"}, {"0.message_id", anID}},
		then: func(s *session, _ any) {
			s.expect("stored", s.stored("$Q"), `{"n":1}`, `{"n":2}`)
		},
	},
	{
		name:   "queenctl push: no partition, no transactionId, payloads of every JSON kind, a traceId as typed",
		method: "POST", path: "/api/v1/push", header: []string{"Content-Type", "application/json"},
		body: `{"items":[{"queue":"$Q","payload":"s"},{"queue":"$Q","payload":42},{"queue":"$Q","payload":[1,2]},` +
			`{"queue":"$Q","payload":null},{"queue":"$Q","payload":{"k":true},"traceId":"not-a-uuid"}]}`,
		status: 200,
		// queenctl counts queued or buffered as stored, anything else as failed. A traceId
		// that is not a UUID fails its item alone (docs/compat.md).
		reads: []field{{"0.status", "queued"}, {"1.status", "queued"}, {"2.status", "queued"}, {"3.status", "queued"},
			{"4.status", "failed"}, {"4.error", "traceId must be a UUID"}, {"0.transaction_id", text}},
		then: func(s *session, _ any) {
			s.expect("stored in Default", s.stored("$Q"), `"s"`, `42`, `[1,2]`, `null`)
		},
	},
}

// popShapes: GET /api/v1/pop/queue/{q}[/partition/{p}].
var popShapes = []exchange{
	{
		name:   "Go pop: alphabetical parameters, autoAck=false, wait=false, namespace and task beside a queue path",
		given:  func(s *session) { s.push("$Q", "Default", `{"n":1}`, `{"n":2}`) },
		method: "GET", path: "/api/v1/pop/queue/$Q?autoAck=false&batch=1&consumerGroup=$G&namespace=ns&task=tk&timeout=30000&wait=false",
		header: []string{"Content-Type", "application/json", "Accept", "application/json"},
		status: 200,
		reads: []field{{"messages.0.transactionId", "tx-1"}, {"messages.0.partitionId", "$PID"}, {"messages.0.leaseId", anID},
			{"messages.0.partition", "Default"}, {"messages.0.data", map[string]any{"n": 1.0}},
			{"messages.0.createdAt", aTime}, {"messages.0.producerSub", nil}},
		then: func(s *session, answer any) {
			lease, _ := lookup(answer, "messages.0.leaseId")
			s.vars["LEASE"] = lease.(string)
			s.do("POST", "/api/v1/ack", `{"transactionId":"tx-1","partitionId":"$PID","leaseId":"$LEASE","status":"completed","consumerGroup":"$G"}`)
			s.expect("the group's next pop", s.pop("/api/v1/pop/queue/$Q?batch=10&consumerGroup=$G&wait=false"), `{"n":2}`)
		},
	},
	{
		name:   "JS pop: insertion order, wait=true with messages waiting, subscriptionMode=from_beginning",
		given:  func(s *session) { s.push("$Q", "Default", `1`, `2`, `3`) },
		method: "GET", path: "/api/v1/pop/queue/$Q?batch=2&wait=true&timeout=30000&consumerGroup=$G&subscriptionMode=from_beginning",
		status: 200,
		reads: []field{{"messages.0.data", 1.0}, {"messages.1.data", 2.0}, {"messages.0.leaseId", anID},
			{"messages.0.consumerGroup", "$G"}, {"messages.0.id", anID}},
		then: func(s *session, answer any) {
			lease, _ := lookup(answer, "messages.0.leaseId")
			s.vars["LEASE"] = lease.(string)
			// The JS consume loop acks through /ack/batch.
			s.do("POST", "/api/v1/ack/batch", `{"acknowledgments":[{"transactionId":"tx-1","partitionId":"$PID","status":"completed","error":null,"leaseId":"$LEASE"},`+
				`{"transactionId":"tx-2","partitionId":"$PID","status":"completed","error":null,"leaseId":"$LEASE"}],"consumerGroup":"$G"}`)
			s.expect("the group's next pop", s.pop("/api/v1/pop/queue/$Q?batch=2&wait=false&consumerGroup=$G"), `3`)
		},
	},
	{
		name:   "queenctl pop --auto-ack: leaseId is empty and the cursor moves at once",
		given:  func(s *session) { s.push("$Q", "Default", `"a"`, `"b"`) },
		method: "GET", path: "/api/v1/pop/queue/$Q?autoAck=true&batch=1&timeout=10000&wait=true",
		status: 200,
		reads:  []field{{"messages.0.data", "a"}, {"messages.0.leaseId", ""}, {"leaseId", ""}},
		then: func(s *session, _ any) {
			s.expect("the next pop", s.pop("/api/v1/pop/queue/$Q?autoAck=true&batch=10&wait=false"), `"b"`)
		},
	},
	{
		name:   "Go pop: names percent-encoded in the path",
		given:  func(s *session) { s.push("$Q x", "p/1", `"in p/1"`) },
		method: "GET", path: "/api/v1/pop/queue/$Q%20x/partition/p%2F1?autoAck=true&batch=1&wait=false",
		status: 200,
		reads:  []field{{"messages.0.data", "in p/1"}, {"messages.0.partition", "p/1"}},
	},
	{
		name:   "Go pop: subscriptionMode=new skips what is stored; subscriptionFrom=now is read",
		given:  func(s *session) { s.push("$Q", "Default", `"old"`) },
		method: "GET", path: "/api/v1/pop/queue/$Q?autoAck=true&batch=10&consumerGroup=$G&subscriptionFrom=now&subscriptionMode=new&wait=false",
		status: 200,
		reads:  []field{{"messages", emptyList}},
		then: func(s *session, _ any) {
			s.do("POST", "/api/v1/push", `{"items":[{"queue":"$Q","partition":"Default","payload":"new","transactionId":"tx-new"}]}`)
			s.expect("the group after a new push", s.pop("/api/v1/pop/queue/$Q?autoAck=true&batch=10&consumerGroup=$G&wait=false"), `"new"`)
		},
	},
	{
		name:   "JS pop: wait=true on an empty queue answers an object with messages:[] at the timeout",
		method: "GET", path: "/api/v1/pop/queue/$Q?batch=1&wait=true&timeout=200",
		status: 200,
		reads:  []field{{"messages", emptyList}},
	},
}

// ackShapes: POST /api/v1/ack and /api/v1/ack/batch.
var ackShapes = []exchange{
	{
		name: "Go ack: leaseId, no error, no consumerGroup",
		given: func(s *session) {
			s.push("$Q", "Default", `1`, `2`)
			s.pop("/api/v1/pop/queue/$Q?batch=1&wait=false")
		},
		method: "POST", path: "/api/v1/ack",
		body:   `{"transactionId":"$TX1","partitionId":"$PID","leaseId":"$LEASE","status":"completed"}`,
		status: 200,
		reads:  []field{{"0.success", true}, {"0.error", nil}},
		then: func(s *session, _ any) {
			s.expect("the next pop", s.pop("/api/v1/pop/queue/$Q?batch=10&wait=false"), `2`)
		},
	},
	{
		name: "JS nack: consumerGroup null, error null, leaseId last",
		given: func(s *session) {
			s.push("$Q", "Default", `"again"`)
			s.pop("/api/v1/pop/queue/$Q?batch=1&wait=false")
		},
		method: "POST", path: "/api/v1/ack",
		body:   `{"transactionId":"$TX1","partitionId":"$PID","status":"failed","error":null,"consumerGroup":null,"leaseId":"$LEASE"}`,
		status: 200,
		reads:  []field{{"0.success", true}, {"0.error", nil}},
		then: func(s *session, _ any) {
			s.expect("redelivered", s.pop("/api/v1/pop/queue/$Q?batch=10&wait=false"), `"again"`)
		},
	},
	{
		name:   "JS ack without a pop: consumerGroup null, error null, leaseId absent applies in queue mode",
		given:  func(s *session) { s.push("$Q", "Default", `1`, `2`) },
		method: "POST", path: "/api/v1/ack",
		body:   `{"transactionId":"tx-1","partitionId":"$PID","status":"completed","error":null,"consumerGroup":null}`,
		status: 200,
		reads:  []field{{"0.success", true}, {"0.error", nil}},
		then: func(s *session, _ any) {
			s.expect("the next pop", s.pop("/api/v1/pop/queue/$Q?batch=10&autoAck=true&wait=false"), `2`)
		},
	},
	{
		name: "Go ack batch: top-level consumerGroup, items with leaseId and no error",
		given: func(s *session) {
			s.push("$Q", "Default", `1`, `2`, `3`)
			s.pop("/api/v1/pop/queue/$Q?batch=2&consumerGroup=$G&wait=false")
		},
		method: "POST", path: "/api/v1/ack/batch",
		body: `{"acknowledgments":[{"transactionId":"$TX1","partitionId":"$PID","leaseId":"$LEASE","status":"completed"},` +
			`{"transactionId":"$TX2","partitionId":"$PID","leaseId":"$LEASE","status":"completed"}],"consumerGroup":"$G"}`,
		status: 200,
		// Go reads a non-empty error string per position as that item's failure.
		reads: []field{{"0.error", nil}, {"1.error", nil}, {"0.success", true}, {"1.success", true}},
		then: func(s *session, _ any) {
			s.expect("the group's next pop", s.pop("/api/v1/pop/queue/$Q?batch=10&consumerGroup=$G&wait=false"), `3`)
		},
	},
	{
		name: "JS ack batch of one, consumerGroup null, error null",
		given: func(s *session) {
			s.push("$Q", "Default", `1`, `2`)
			s.pop("/api/v1/pop/queue/$Q?batch=1&wait=false")
		},
		method: "POST", path: "/api/v1/ack/batch",
		body:   `{"acknowledgments":[{"transactionId":"$TX1","partitionId":"$PID","status":"completed","error":null,"leaseId":"$LEASE"}],"consumerGroup":null}`,
		status: 200,
		reads:  []field{{"0.success", true}, {"0.error", nil}},
		then: func(s *session, _ any) {
			s.expect("the next pop", s.pop("/api/v1/pop/queue/$Q?batch=10&wait=false"), `2`)
		},
	},
	{
		name: "Python ack: a free-text status dlq dead-letters the message",
		given: func(s *session) {
			s.push("$Q", "Default", `"bad"`, `"good"`)
			s.pop("/api/v1/pop/queue/$Q?batch=1&wait=false")
		},
		method: "POST", path: "/api/v1/ack",
		body:   `{"transactionId":"$TX1","partitionId":"$PID","status":"dlq","error":"poison","consumerGroup":null,"leaseId":"$LEASE"}`,
		status: 200,
		// Python reads success on the first item.
		reads: []field{{"0.success", true}, {"0.dlq", true}},
		then: func(s *session, _ any) {
			dlq := s.do("GET", "/api/v1/dlq?queue=$Q&limit=100&offset=0", nil)
			if tx, _ := lookup(dlq, "messages.0.transactionId"); tx != "tx-1" {
				s.t.Fatalf("dead letters: %s", compact(dlq))
			}
			s.expect("the next pop", s.pop("/api/v1/pop/queue/$Q?batch=10&wait=false"), `"good"`)
		},
	},
	{
		name: "JS ack: status retry redelivers, status success is completed",
		given: func(s *session) {
			s.push("$Q", "Default", `"x"`)
			s.pop("/api/v1/pop/queue/$Q?batch=1&wait=false")
		},
		method: "POST", path: "/api/v1/ack",
		body:   `{"transactionId":"$TX1","partitionId":"$PID","status":"retry","error":null,"consumerGroup":null,"leaseId":"$LEASE"}`,
		status: 200,
		reads:  []field{{"0.success", true}},
		then: func(s *session, _ any) {
			s.expect("redelivered", s.pop("/api/v1/pop/queue/$Q?batch=1&wait=false"), `"x"`)
			s.do("POST", "/api/v1/ack", `{"transactionId":"$TX1","partitionId":"$PID","status":"success","error":null,"consumerGroup":null,"leaseId":"$LEASE"}`)
			s.expect("after success", s.pop("/api/v1/pop/queue/$Q?batch=1&wait=false"))
		},
	},
	{
		name: "an ack under another consumer's lease answers success:false with the reason",
		given: func(s *session) {
			s.push("$Q", "Default", `"held"`)
			s.pop("/api/v1/pop/queue/$Q?batch=1&wait=false")
		},
		method: "POST", path: "/api/v1/ack",
		body:   `{"transactionId":"$TX1","partitionId":"$PID","status":"completed","error":null,"consumerGroup":null}`,
		status: 200,
		reads:  []field{{"0.success", false}, {"0.error", "Invalid or expired lease"}},
		then: func(s *session, _ any) {
			s.do("POST", "/api/v1/ack", `{"transactionId":"$TX1","partitionId":"$PID","leaseId":"$LEASE","status":"completed"}`)
			s.expect("acked by the lease holder", s.stored("$Q"), `"held"`)
			s.expect("queue mode after the holder's ack", s.pop("/api/v1/pop/queue/$Q?batch=1&wait=false"))
		},
	},
}

// transactionShapes: POST /api/v1/transaction. The clients send no leaseId on ack operations;
// they list the leases of the messages they ack in requiredLeases.
var transactionShapes = []exchange{
	{
		name: "Go transaction: ack without leaseId, push with a transactionId, requiredLeases naming the pop's lease",
		given: func(s *session) {
			s.push("$Q", "Default", `"in-1"`, `"in-2"`)
			s.pop("/api/v1/pop/queue/$Q?batch=1&consumerGroup=$G&wait=false")
		},
		method: "POST", path: "/api/v1/transaction", header: []string{"Content-Type", "application/json"},
		body: `{"operations":[{"type":"ack","transactionId":"$TX1","partitionId":"$PID","status":"completed","consumerGroup":"$G"},` +
			`{"type":"push","items":[{"queue":"$OUT","partition":"Default","payload":{"derived":true},"transactionId":"0197f1c2-8a00-7000-8000-0000000000a1"}]}],` +
			`"requiredLeases":["$LEASE"]}`,
		status: 200,
		reads:  []field{{"success", true}, {"error", absent}, {"transactionId", anID}},
		then: func(s *session, _ any) {
			s.expect("pushed", s.stored("$OUT"), `{"derived":true}`)
			s.expect("the group's next pop", s.pop("/api/v1/pop/queue/$Q?batch=10&consumerGroup=$G&wait=false"), `"in-2"`)
		},
	},
	{
		name: "JS transaction: queue mode, push items without transactionId or partition, requiredLeases",
		given: func(s *session) {
			s.push("$Q", "Default", `"in-1"`, `"in-2"`)
			s.pop("/api/v1/pop/queue/$Q?batch=2&wait=false")
		},
		method: "POST", path: "/api/v1/transaction",
		body: `{"operations":[{"type":"ack","transactionId":"$TX1","partitionId":"$PID","status":"completed"},` +
			`{"type":"ack","transactionId":"$TX2","partitionId":"$PID","status":"completed"},` +
			`{"type":"push","items":[{"queue":"$OUT","payload":{"derived":1}},{"queue":"$OUT","payload":{"derived":2}}]}],` +
			`"requiredLeases":["$LEASE"]}`,
		status: 200,
		reads:  []field{{"success", true}, {"results.2.messageId", anID}, {"results.3.queueName", "$OUT"}},
		then: func(s *session, _ any) {
			s.expect("pushed", s.stored("$OUT"), `{"derived":1}`, `{"derived":2}`)
			s.expect("the next pop", s.pop("/api/v1/pop/queue/$Q?batch=10&wait=false"))
		},
	},
	{
		name: "a transaction whose requiredLeases miss the lease in force is refused whole",
		given: func(s *session) {
			s.push("$Q", "Default", `"in-1"`)
			s.pop("/api/v1/pop/queue/$Q?batch=1&wait=false")
		},
		method: "POST", path: "/api/v1/transaction",
		body: `{"operations":[{"type":"push","items":[{"queue":"$OUT","payload":"stale"}]},` +
			`{"type":"ack","transactionId":"$TX1","partitionId":"$PID","status":"completed"}],` +
			`"requiredLeases":["0197f1c2-8a00-7000-8000-0000000000ff"]}`,
		status: 200,
		reads:  []field{{"success", false}, {"error", "ACK operation failed: Invalid or expired lease"}},
		then: func(s *session, _ any) {
			s.expect("nothing pushed", s.stored("$OUT"))
			// The cursor did not move: the lease holder's own ack still applies.
			ack := s.do("POST", "/api/v1/ack", `{"transactionId":"$TX1","partitionId":"$PID","leaseId":"$LEASE","status":"completed"}`)
			if ok, _ := lookup(ack, "0.success"); ok != true {
				s.t.Fatalf("the holder's ack after the refused transaction: %s", compact(ack))
			}
		},
	},
	{
		name:   "Go transaction: status absent, requiredLeases [], a message under no lease",
		given:  func(s *session) { s.push("$Q", "Default", `"in-1"`, `"in-2"`) },
		method: "POST", path: "/api/v1/transaction",
		body: `{"operations":[{"type":"ack","transactionId":"tx-1","partitionId":"$PID"},` +
			`{"type":"push","items":[{"queue":"$OUT","partition":"Default","payload":"done","transactionId":"0197f1c2-8a00-7000-8000-0000000000a2"}]}],` +
			`"requiredLeases":[]}`,
		status: 200,
		reads:  []field{{"success", true}},
		then: func(s *session, _ any) {
			s.expect("pushed", s.stored("$OUT"), `"done"`)
			s.expect("the next pop", s.pop("/api/v1/pop/queue/$Q?batch=10&wait=false"), `"in-2"`)
		},
	},
	{
		name:   "a transaction's single-item push form, with data instead of payload",
		method: "POST", path: "/api/v1/transaction",
		body:   `{"operations":[{"type":"push","queue":"$OUT","partition":"p","data":{"x":1}}],"requiredLeases":[]}`,
		status: 200,
		reads:  []field{{"success", true}, {"results.0.type", "push"}, {"results.0.success", true}},
		then: func(s *session, _ any) {
			s.expect("pushed", s.stored("$OUT"), `{"x":1}`)
		},
	},
	{
		name:   "queenctl tx: push ops grouped per (queue, partition) with fresh transactionIds, requiredLeases []",
		method: "POST", path: "/api/v1/transaction",
		body: `{"operations":[{"type":"push","items":[{"queue":"$OUT","partition":"a","payload":1,"transactionId":"0197f1c2-8a00-7000-8000-0000000000b1"},` +
			`{"queue":"$OUT","partition":"a","payload":2,"transactionId":"0197f1c2-8a00-7000-8000-0000000000b2"}]},` +
			`{"type":"push","items":[{"queue":"$OUT","partition":"Default","payload":3,"transactionId":"0197f1c2-8a00-7000-8000-0000000000b3"}]}],` +
			`"requiredLeases":[]}`,
		status: 200,
		reads:  []field{{"success", true}, {"error", absent}},
		then: func(s *session, _ any) {
			s.expect("partition a", s.pop("/api/v1/pop/queue/$OUT/partition/a?batch=10&autoAck=true&wait=false"), `1`, `2`)
			s.expect("Default", s.pop("/api/v1/pop/queue/$OUT?batch=10&autoAck=true&wait=false"), `3`)
		},
	},
	{
		name: "a transaction sent again (a client's retry) reports its pushes as duplicates and stores nothing twice",
		given: func(s *session) {
			s.push("$Q", "Default", `"in-1"`)
			s.pop("/api/v1/pop/queue/$Q?batch=1&wait=false")
			s.do("POST", "/api/v1/transaction", `{"operations":[{"type":"ack","transactionId":"$TX1","partitionId":"$PID","status":"completed"},`+
				`{"type":"push","items":[{"queue":"$OUT","partition":"Default","payload":"once","transactionId":"0197f1c2-8a00-7000-8000-0000000000c1"}]}],"requiredLeases":["$LEASE"]}`)
		},
		method: "POST", path: "/api/v1/transaction",
		body: `{"operations":[{"type":"ack","transactionId":"$TX1","partitionId":"$PID","status":"completed"},` +
			`{"type":"push","items":[{"queue":"$OUT","partition":"Default","payload":"once","transactionId":"0197f1c2-8a00-7000-8000-0000000000c1"}]}],"requiredLeases":["$LEASE"]}`,
		status: 200,
		reads:  []field{{"success", true}, {"results.1.status", "duplicate"}},
		then: func(s *session, _ any) {
			s.expect("pushed once", s.stored("$OUT"), `"once"`)
		},
	},
}

// leaseShapes: POST /api/v1/lease/{leaseId}/extend, sent once per distinct lease.
var leaseShapes = []exchange{
	{
		name: "Go and JS renew: body {}",
		given: func(s *session) {
			s.push("$Q", "Default", `1`)
			s.pop("/api/v1/pop/queue/$Q?batch=1&wait=false")
		},
		method: "POST", path: "/api/v1/lease/$LEASE/extend", body: `{}`, header: []string{"Content-Type", "application/json"},
		status: 200,
		reads:  []field{{"0.success", true}, {"0.leaseId", "$LEASE"}, {"0.expiresAt", aTime}},
		then: func(s *session, _ any) {
			ack := s.do("POST", "/api/v1/ack", `{"transactionId":"$TX1","partitionId":"$PID","leaseId":"$LEASE","status":"completed"}`)
			if ok, _ := lookup(ack, "0.success"); ok != true {
				s.t.Fatalf("ack under the renewed lease: %s", compact(ack))
			}
		},
	},
	{
		name: "Python renew: no body and no Content-Type",
		given: func(s *session) {
			s.push("$Q", "Default", `1`)
			s.pop("/api/v1/pop/queue/$Q?batch=1&wait=false")
		},
		method: "POST", path: "/api/v1/lease/$LEASE/extend",
		status: 200,
		reads:  []field{{"0.success", true}, {"0.expiresAt", aTime}},
	},
}

// configureShapes: POST /api/v1/configure and DELETE /api/v1/resources/queues/{q}.
var configureShapes = []exchange{
	{
		name:   "Go create without options",
		method: "POST", path: "/api/v1/configure", body: `{"queue":"$Q"}`,
		status: 200,
		reads:  []field{{"configured", true}, {"queue", "$Q"}, {"options.leaseTime", 300.0}},
	},
	{
		name:   "JS and Python create: namespace and task null, the nine options, an unknown key",
		method: "POST", path: "/api/v1/configure",
		body: `{"queue":"$Q","namespace":null,"task":null,"options":{"leaseTime":45,"retryLimit":3,"priority":0,"delayedProcessing":0,` +
			`"windowBuffer":0,"maxSize":0,"retentionSeconds":0,"completedRetentionSeconds":0,"encryptionEnabled":false,"retentionEnabled":false}}`,
		status: 200,
		// JS and Python throw on a truthy error.
		reads: []field{{"error", absent}, {"options.leaseTime", 45.0}},
		then: func(s *session, _ any) {
			// The queue's lease time holds: a pop's lease ends leaseTime after it.
			q := s.do("GET", "/api/v1/resources/queues/$Q", nil)
			if lt, _ := lookup(q, "options.leaseTime"); lt != 45.0 {
				s.t.Fatalf("stored configuration: %s", compact(q))
			}
		},
	},
	{
		name:   "Go configure of some options keeps the others",
		given:  func(s *session) { s.do("POST", "/api/v1/configure", `{"queue":"$Q","options":{"retryLimit":7}}`) },
		method: "POST", path: "/api/v1/configure", body: `{"queue":"$Q","namespace":"billing","options":{"leaseTime":30}}`,
		status: 200,
		reads:  []field{{"options.leaseTime", 30.0}, {"options.retryLimit", 7.0}, {"namespace", "billing"}},
	},
	{
		name:   "JS create of a queue named \"\"",
		method: "POST", path: "/api/v1/configure", body: `{"queue":"","namespace":null,"task":null,"options":{"leaseTime":300}}`,
		status: 200,
		reads:  []field{{"configured", true}, {"queue", ""}, {"error", absent}},
	},
	{
		name:   "Go and JS delete: Content-Type and no body",
		given:  func(s *session) { s.push("$Q", "Default", `1`) },
		method: "DELETE", path: "/api/v1/resources/queues/$Q", header: []string{"Content-Type", "application/json"},
		status: 200,
		reads:  []field{{"error", absent}},
		then: func(s *session, _ any) {
			s.expect("after the delete", s.stored("$Q"))
		},
	},
}

// groupShapes: the consumer-group routes and the statistics refresh.
var groupShapes = []exchange{
	{
		name: "Go seek to the end",
		given: func(s *session) {
			s.push("$Q", "Default", `1`, `2`)
			s.pop("/api/v1/pop/queue/$Q?autoAck=true&batch=1&consumerGroup=$G&wait=false")
		},
		method: "POST", path: "/api/v1/consumer-groups/$G/queues/$Q/seek", body: `{"toEnd":true}`,
		status: 200,
		then: func(s *session, _ any) {
			s.expect("the group after the seek", s.pop("/api/v1/pop/queue/$Q?autoAck=true&batch=10&consumerGroup=$G&wait=false"))
		},
	},
	{
		name: "queenctl seek to the beginning: a timestamp",
		given: func(s *session) {
			s.push("$Q", "Default", `1`, `2`)
			s.pop("/api/v1/pop/queue/$Q?autoAck=true&batch=10&consumerGroup=$G&wait=false")
		},
		method: "POST", path: "/api/v1/consumer-groups/$G/queues/$Q/seek", body: `{"timestamp":"1970-01-01T00:00:00Z"}`,
		status: 200,
		then: func(s *session, _ any) {
			s.expect("the group after the seek", s.pop("/api/v1/pop/queue/$Q?autoAck=true&batch=10&consumerGroup=$G&wait=false"), `1`, `2`)
		},
	},
	{
		name: "Go partition seek with {}",
		given: func(s *session) {
			s.push("$Q", "p", `1`, `2`)
			s.pop("/api/v1/pop/queue/$Q/partition/p?autoAck=true&batch=1&consumerGroup=$G&wait=false")
		},
		method: "POST", path: "/api/v1/consumer-groups/$G/queues/$Q/partitions/p/seek", body: `{}`,
		status: 200,
		then: func(s *session, _ any) {
			s.expect("the group after the seek", s.pop("/api/v1/pop/queue/$Q/partition/p?autoAck=true&batch=10&consumerGroup=$G&wait=false"))
		},
	},
	{
		name: "queenctl cg delete: deleteMetadata=false, the group raw in the path",
		given: func(s *session) {
			s.push("$Q", "Default", `1`)
			s.pop("/api/v1/pop/queue/$Q?autoAck=true&batch=1&consumerGroup=$G&wait=false")
		},
		method: "DELETE", path: "/api/v1/consumer-groups/$G?deleteMetadata=false",
		status: 200,
		then: func(s *session, _ any) {
			// A new group of the same name starts from the beginning again.
			s.expect("the group after the delete", s.pop("/api/v1/pop/queue/$Q?autoAck=true&batch=10&consumerGroup=$G&wait=false"), `1`)
		},
	},
	{
		name: "Go subscription timestamp",
		given: func(s *session) {
			s.push("$Q", "Default", `1`)
			s.pop("/api/v1/pop/queue/$Q?autoAck=true&batch=1&consumerGroup=$G&wait=false")
		},
		method: "POST", path: "/api/v1/consumer-groups/$G/subscription", body: `{"subscriptionTimestamp":"2026-01-01T00:00:00+02:00"}`,
		status: 200,
	},
	{
		name: "consumer-group list as queenctl reads it",
		given: func(s *session) {
			s.push("$Q", "Default", `1`)
			s.pop("/api/v1/pop/queue/$Q?batch=1&consumerGroup=$G&wait=false")
		},
		method: "GET", path: "/api/v1/consumer-groups", header: []string{"Content-Type", "application/json"},
		status: 200,
	},
	{
		name:   "Go and Python statistics refresh: no body",
		method: "POST", path: "/api/v1/stats/refresh",
		status: 200,
	},
	{
		name:   "JS statistics refresh: {}",
		method: "POST", path: "/api/v1/stats/refresh", body: `{}`,
		status: 200,
	},
}

func TestPushShapes(t *testing.T)        { replay(t, pushShapes) }
func TestPopShapes(t *testing.T)         { replay(t, popShapes) }
func TestAckShapes(t *testing.T)         { replay(t, ackShapes) }
func TestTransactionShapes(t *testing.T) { replay(t, transactionShapes) }
func TestLeaseShapes(t *testing.T)       { replay(t, leaseShapes) }
func TestConfigureShapes(t *testing.T)   { replay(t, configureShapes) }
func TestGroupShapes(t *testing.T)       { replay(t, groupShapes) }

// register registers a stream query on $Q with the sink $OUT and sets $QID and $SG, the
// group its runners pop $Q with.
func (s *session) register() {
	s.t.Helper()
	answer := s.do("POST", "/streams/v1/queries", `{"name":"$Q.query","source_queue":"$Q","config_hash":"`+
		`3f2a9c0000000000000000000000000000000000000000000000000000000000","reset":false,"sink_queue":"$OUT"}`)
	id, _ := lookup(answer, "query_id")
	s.vars["QID"] = id.(string)
	s.vars["SG"] = "streams." + id.(string)
}

// streamsShapes: the three routes of the streams SDKs (register, state/get, cycle) and their
// source pop.
var streamsShapes = []exchange{
	{
		name:   "register: a bare 64-hex config_hash, reset false, sink_queue absent",
		method: "POST", path: "/streams/v1/queries",
		body:   `{"name":"$Q.query","source_queue":"$Q","config_hash":"3f2a9c0000000000000000000000000000000000000000000000000000000001","reset":false}`,
		status: 200,
		reads:  []field{{"success", true}, {"query_id", anID}, {"name", "$Q.query"}, {"fresh", true}, {"reset", false}},
	},
	{
		name: "Go runner: source pop, then a cycle whose ack has no partitionId",
		given: func(s *session) {
			s.push("$Q", "Default", `{"v":1}`, `{"v":2}`)
			s.register()
			s.pop("/api/v1/pop/queue/$Q?batch=200&consumerGroup=$SG&partitions=4&timeout=1000&wait=true")
		},
		method: "POST", path: "/streams/v1/cycle",
		body: `{"query_id":"$QID","partition_id":"$PID","consumer_group":"$SG",` +
			`"state_ops":[{"type":"upsert","key":"tumb:60\u001f2026-05-06T10:01:00.000Z\u001fk","value":{"acc":3,"windowStart":0,"windowEnd":60000}},` +
			`{"type":"delete","key":"tumb:60\u001fold"}],` +
			`"push_items":[{"queue":"$OUT","partition":"Default","payload":{"value":3}}],` +
			`"ack":{"transactionId":"$TX2","leaseId":"$LEASE","status":"completed","count":2},"release_lease":true}`,
		status: 200,
		reads:  []field{{"success", true}, {"error", absent}},
		then: func(s *session, _ any) {
			s.expect("sink", s.stored("$OUT"), `{"value":3}`)
			s.expect("the runners' group after the cycle", s.pop("/api/v1/pop/queue/$Q?batch=200&consumerGroup=$SG&wait=false"))
			state := s.do("POST", "/streams/v1/state/get", `{"query_id":"$QID","partition_id":"$PID","keys":null}`)
			if key, _ := lookup(state, "rows.0.key"); key != "tumb:60\x1f2026-05-06T10:01:00.000Z\x1fk" {
				s.t.Fatalf("state after the cycle: %s", compact(state))
			}
		},
	},
	{
		name: "Go state read: keys null",
		given: func(s *session) {
			s.push("$Q", "Default", `1`)
			s.register()
			s.pop("/api/v1/pop/queue/$Q?batch=200&consumerGroup=$SG&timeout=1000&wait=true")
			s.do("POST", "/streams/v1/cycle", `{"query_id":"$QID","partition_id":"$PID","consumer_group":"$SG","state_ops":[{"type":"upsert","key":"__wm__","value":{"eventTimeMs":5}}],"push_items":[],"ack":null,"release_lease":false}`)
		},
		method: "POST", path: "/streams/v1/state/get",
		body:   `{"query_id":"$QID","partition_id":"$PID","keys":null}`,
		status: 200,
		reads:  []field{{"rows.0.key", "__wm__"}, {"rows.0.value", map[string]any{"eventTimeMs": 5.0}}},
	},
	{
		name: "JS idle flush: a ripe scan with a \\u001f key prefix and an integer ripe_at_or_before",
		given: func(s *session) {
			s.push("$Q", "Default", `1`)
			s.register()
			s.pop("/api/v1/pop/queue/$Q?batch=200&wait=true&timeout=1000&consumerGroup=$SG")
			s.do("POST", "/streams/v1/cycle", `{"query_id":"$QID","partition_id":"$PID","consumer_group":"$SG","state_ops":[`+
				`{"type":"upsert","key":"tumb:60\u001fa","value":{"acc":1,"windowStart":0,"windowEnd":1778061720000}},`+
				`{"type":"upsert","key":"tumb:60\u001fb","value":{"acc":2,"windowStart":0,"windowEnd":1778061780000}}],"push_items":[],"ack":null,"release_lease":false}`)
		},
		method: "POST", path: "/streams/v1/state/get",
		body:   `{"query_id":"$QID","partition_id":"$PID","keys":[],"key_prefix":"tumb:60\u001f","ripe_at_or_before":1778061720000}`,
		status: 200,
		reads:  []field{{"rows.0.key", "tumb:60\x1fa"}, {"rows.1", absent}},
	},
	{
		name: "flush cycle: ack null, empty state_ops and push_items, release_lease false",
		given: func(s *session) {
			s.push("$Q", "Default", `1`)
			s.register()
			s.pop("/api/v1/pop/queue/$Q?batch=200&wait=true&timeout=1000&consumerGroup=$SG")
		},
		method: "POST", path: "/streams/v1/cycle",
		body:   `{"query_id":"$QID","partition_id":"$PID","consumer_group":"$SG","state_ops":[],"push_items":[],"ack":null,"release_lease":false}`,
		status: 200,
		reads:  []field{{"success", true}},
		then: func(s *session, _ any) {
			// Nothing acknowledged: the lease still holds the partition for the runner.
			s.do("POST", "/streams/v1/cycle", `{"query_id":"$QID","partition_id":"$PID","consumer_group":"$SG","state_ops":[],"push_items":[],`+
				`"ack":{"transactionId":"$TX1","leaseId":"$LEASE","status":"completed","count":1},"release_lease":true}`)
			s.expect("the group after the runner's ack", s.pop("/api/v1/pop/queue/$Q?batch=200&consumerGroup=$SG&wait=false"))
		},
	},
	{
		name: "Python cycle: leaseId null while a lease is in force is refused with the reference's text",
		given: func(s *session) {
			s.push("$Q", "Default", `1`)
			s.register()
			s.pop("/api/v1/pop/queue/$Q?batch=200&wait=true&timeout=1000&consumerGroup=$SG")
		},
		method: "POST", path: "/streams/v1/cycle",
		body: `{"query_id":"$QID","partition_id":"$PID","consumer_group":"$SG","state_ops":[],"push_items":[{"queue":"$OUT","partition":"Default","payload":{"value":1}}],` +
			`"ack":{"transactionId":"$TX1","leaseId":null,"status":"completed","count":1},"release_lease":true}`,
		status: 200,
		reads:  []field{{"success", false}, {"error", "Invalid or expired lease"}},
		then: func(s *session, _ any) {
			s.expect("sink", s.stored("$OUT"))
		},
	},
}

func TestStreamsShapes(t *testing.T) { replay(t, streamsShapes) }

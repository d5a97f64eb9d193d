package http

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/google/uuid"

	"queen/persistence"
)

// wantBad fails unless err is a *badRequest whose message is exactly want.
func wantBad(t *testing.T, err error, want string) {
	t.Helper()
	var bad *badRequest
	if !errors.As(err, &bad) {
		t.Fatalf("error = %T %v, want *badRequest %q", err, err, want)
	}
	if bad.msg != want {
		t.Fatalf("error = %q, want %q", bad.msg, want)
	}
}

func pushOne(t *testing.T, fields string) pushItem {
	t.Helper()
	items, err := decodePush([]byte(`{"items":[` + fields + `]}`))
	if err != nil {
		t.Fatalf("decodePush(%s): %v", fields, err)
	}
	if len(items) != 1 {
		t.Fatalf("decodePush(%s): %d items", fields, len(items))
	}
	return items[0]
}

func TestDecodePushErrors(t *testing.T) {
	item := func(fields ...string) string { return `{"items":[` + strings.Join(fields, ",") + `]}` }
	cases := []struct{ name, body, want string }{
		{"empty body", ``, "Empty request body"},
		{"blank body", " \r\n\t", "Empty request body"},
		{"truncated", `{`, "Invalid JSON: unexpected end of JSON input"},
		{"trailing garbage", `{}}`, "Invalid JSON: invalid character '}' after top-level value"},
		{"null body", `null`, "request body must be a JSON object"},
		{"no items", `{}`, "items array is required"},
		{"items null", `{"items":null}`, "items array is required"},
		{"items object", `{"items":{}}`, "items array is required"},
		{"items string", `{"items":"x"}`, "items array is required"},
		{"item not an object", `{"items":[1]}`, "items array is required"},
		{"queue missing", item(`{}`), "items[0].queue is required"},
		{"queue null", item(`{"queue":null}`), "items[0].queue is required"},
		{"queue empty", item(`{"queue":""}`), "items[0].queue is required"},
		{"queue number", item(`{"queue":5}`), "items[0].queue must be a string"},
		{"queue array, second item", item(`{"queue":"q"}`, `{"queue":["q"]}`), "items[1].queue must be a string"},
		{"queue object", item(`{"queue":{"name":"q"}}`), "items[0].queue must be a string"},
		{"queue 256", item(`{"queue":"` + name256 + `"}`), "items[0].queue must be at most 255 characters"},
		{"partition empty", item(`{"queue":"q","partition":""}`), "items[0].partition must not be empty"},
		{"partition number", item(`{"queue":"q","partition":7}`), "items[0].partition must be a string"},
		{"partition 256", item(`{"queue":"q","partition":"` + name256 + `"}`), "items[0].partition must be at most 255 characters"},
		{"transactionId number", item(`{"queue":"q","transactionId":5}`), "items[0].transactionId must be a string"},
		{"transactionId 256", item(`{"queue":"q","transactionId":"` + name256 + `"}`), "items[0].transactionId must be at most 255 characters"},
		{"traceId number", item(`{"queue":"q","traceId":5}`), "items[0].traceId must be a string"},
		{"payload NUL", item(`{"queue":"q","payload":"a\u0000b"}`), `items[0].payload must not contain the character \u0000`},
		{"payload nested NUL", item(`{"queue":"q"}`, `{"queue":"q","payload":{"a":[1,{"b":"\u0000"}]}}`), `items[1].payload must not contain the character \u0000`},
		{"payload NUL key", item(`{"queue":"q","payload":{"\u0000":1}}`), `items[0].payload must not contain the character \u0000`},
		{"data NUL", item(`{"queue":"q","data":"\u0000"}`), `items[0].payload must not contain the character \u0000`},
		{"first error wins", item(`{"queue":"q","partition":""}`, `{"queue":5}`), "items[0].partition must not be empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			items, err := decodePush([]byte(c.body))
			if items != nil {
				t.Fatalf("items = %v, want nil", items)
			}
			wantBad(t, err, c.want)
		})
	}
}

// A body that is JSON but not an object is refused without encoding/json's Go type names.
func TestDecodeNonObjectBody(t *testing.T) {
	for _, body := range []string{`[]`, `"x"`, `5`, `true`, `null`} {
		for name, decode := range map[string]func([]byte) error{
			"push":        func(b []byte) error { _, err := decodePush(b); return err },
			"ackBatch":    func(b []byte) error { _, err := decodeAckBatch(b); return err },
			"transaction": func(b []byte) error { _, err := decodeTransaction(b); return err },
			"ack":         func(b []byte) error { var a ackJSON; return parseBody(b, &a) },
		} {
			err := decode([]byte(body))
			var bad *badRequest
			if !errors.As(err, &bad) || bad.msg != "request body must be a JSON object" {
				t.Errorf("%s(%s) = %v, want a 400 saying the body must be an object", name, body, err)
			}
		}
	}
}

func TestDecodePushCaptured(t *testing.T) {
	items, err := decodePush([]byte(capturedPush[1]))
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 3 {
		t.Fatalf("%d items, want 3", len(items))
	}
	want := []struct{ queue, partition, tx, payload string }{
		{"orders", "p1", "tx-1", `{"n":1}`},
		{"orders", "p1", "tx-2", `{"n":2}`},
		{"orders", "p2", "", `{"n":3}`},
	}
	for i, w := range want {
		it := items[i]
		if it.sentQueue != w.queue || it.Partition != w.partition || string(it.Payload) != w.payload {
			t.Errorf("item %d = %q/%q payload %s, want %q/%q %s", i, it.sentQueue, it.Partition, it.Payload, w.queue, w.partition, w.payload)
		}
		if w.tx != "" && it.TransactionID != w.tx {
			t.Errorf("item %d transactionId %q, want %q", i, it.TransactionID, w.tx)
		}
		if it.BadTrace != "" || it.ProducerSub != "" || it.Encrypted {
			t.Errorf("item %d: BadTrace %q ProducerSub %v Encrypted %v", i, it.BadTrace, it.ProducerSub, it.Encrypted)
		}
	}
	trace := uuid.NullUUID{UUID: uuid.MustParse(uuidT), Valid: true}
	if items[1].TraceID != trace || items[0].TraceID.Valid || items[2].TraceID.Valid {
		t.Errorf("trace ids %v %v %v, want only item 1 = %s", items[0].TraceID, items[1].TraceID, items[2].TraceID, uuidT)
	}
}

func TestDecodePushDefaults(t *testing.T) {
	it := pushOne(t, `{"queue":"demo"}`)
	if it.sentQueue != "demo" || it.Partition != "Default" {
		t.Errorf("queue/partition = %q/%q, want demo/Default", it.sentQueue, it.Partition)
	}
	if id, err := uuid.Parse(it.TransactionID); err != nil || id.Version() != 4 {
		t.Errorf("generated transactionId %q is not a UUIDv4 (%v)", it.TransactionID, err)
	}
	if string(it.Payload) != "null" || it.TraceID.Valid || it.BadTrace != "" {
		t.Errorf("payload %s trace %v bad %q, want null, none, none", it.Payload, it.TraceID, it.BadTrace)
	}

	for _, fields := range []string{`{"queue":"q","partition":null,"transactionId":null,"traceId":null}`, `{"queue":"q","transactionId":"","traceId":""}`} {
		it := pushOne(t, fields)
		if it.Partition != "Default" || it.TraceID.Valid || it.BadTrace != "" {
			t.Errorf("%s: partition %q trace %v bad %q", fields, it.Partition, it.TraceID, it.BadTrace)
		}
		if _, err := uuid.Parse(it.TransactionID); err != nil {
			t.Errorf("%s: transactionId %q is not a UUID", fields, it.TransactionID)
		}
	}

	items, err := decodePush([]byte(`{"items":[{"queue":"q"},{"queue":"q"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if items[0].TransactionID == items[1].TransactionID {
		t.Errorf("two items got the same generated transactionId %q", items[0].TransactionID)
	}

	items, err = decodePush([]byte(`{"items":[]}`))
	if err != nil || items == nil || len(items) != 0 {
		t.Errorf("empty items = %v, %v; want an empty, non-nil slice", items, err)
	}
}

func TestDecodePushNames(t *testing.T) {
	it := pushOne(t, `{"queue":"`+name255+`","partition":"`+rune255+`","transactionId":"`+name255+`"}`)
	if it.sentQueue != name255 || it.Partition != rune255 || it.TransactionID != name255 {
		t.Errorf("255-character names were not kept")
	}
	// Length counts characters, not bytes.
	items, err := decodePush([]byte(`{"items":[{"queue":"` + rune255 + `é"}]}`))
	if items != nil {
		t.Fatal("256 characters accepted")
	}
	wantBad(t, err, "items[0].queue must be at most 255 characters")
}

func TestDecodePushTraceID(t *testing.T) {
	cases := []struct {
		trace   string
		valid   bool
		badNote string
	}{
		{uuidT, true, ""},
		{strings.ToUpper(uuidT), true, ""},
		{"not-a-uuid", false, "traceId must be a UUID"},
		{"11111111-2222-3333-4444-55555555555", false, "traceId must be a UUID"},
		{"", false, ""},
	}
	for _, c := range cases {
		it := pushOne(t, `{"queue":"q","traceId":"`+c.trace+`"}`)
		if it.TraceID.Valid != c.valid || it.BadTrace != c.badNote {
			t.Errorf("traceId %q: Valid %v BadTrace %q, want %v %q", c.trace, it.TraceID.Valid, it.BadTrace, c.valid, c.badNote)
		}
		if c.valid && it.TraceID.UUID != uuid.MustParse(c.trace) {
			t.Errorf("traceId %q stored as %v", c.trace, it.TraceID)
		}
	}
	// A bad traceId fails only its own item: the others decode.
	items, err := decodePush([]byte(`{"items":[{"queue":"q","traceId":"nope"},{"queue":"q","traceId":"` + uuidT + `"}]}`))
	if err != nil || items[0].BadTrace == "" || items[1].BadTrace != "" || !items[1].TraceID.Valid {
		t.Errorf("mixed traceIds: %+v, %v", items, err)
	}
}

func TestDecodePushPayload(t *testing.T) {
	cases := []struct{ name, fields, want string }{
		{"object", `"payload":{"hello":"world"}`, `{"hello":"world"}`},
		{"object kept byte for byte", `"payload":{ "b" : 1, "a" : [ 2 ] }`, `{ "b" : 1, "a" : [ 2 ] }`},
		{"array", `"payload":[1,"two",null,true]`, `[1,"two",null,true]`},
		{"string", `"payload":"hi"`, `"hi"`},
		{"empty string", `"payload":""`, `""`},
		{"number", `"payload":42`, `42`},
		{"big number kept", `"payload":12345678901234567890`, `12345678901234567890`},
		{"float", `"payload":-1.5e-3`, `-1.5e-3`},
		{"bool", `"payload":false`, `false`},
		{"null", `"payload":null`, `null`},
		{"absent", ``, `null`},
		{"data for payload", `"data":{"x":1}`, `{"x":1}`},
		{"payload wins over data", `"payload":{"a":1},"data":{"b":2}`, `{"a":1}`},
		{"escape decoded", `"payload":"caf\u00e9"`, `"café"`},
		{"no HTML escaping", `"payload":{"h":"<&>\u003c"}`, `{"h":"<&><"}`},
		{"surrogate pair", `"payload":"\ud83d\ude00"`, `"😀"`},
		{"lone high surrogate", `"payload":"\ud800"`, `"` + "\uFFFD" + `"`},
		{"lone low surrogate in object", `"payload":{"s":"a\udc00b"}`, `{"s":"a` + "\uFFFD" + `b"}`},
		{"reversed pair", `"payload":["\udc00\ud800"]`, `["` + "\uFFFD\uFFFD" + `"]`},
		{"lone surrogate key", `"payload":{"\udbff":1}`, `{"` + "\uFFFD" + `":1}`},
		{"lone surrogate in data", `"data":"x\ud800"`, `"x` + "\uFFFD" + `"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fields := `{"queue":"q"`
			if c.fields != "" {
				fields += "," + c.fields
			}
			it := pushOne(t, fields+"}")
			if string(it.Payload) != c.want {
				t.Errorf("payload = %s, want %s", it.Payload, c.want)
			}
			if !json.Valid(it.Payload) {
				t.Errorf("payload %q is not valid JSON", it.Payload)
			}
			if p := jsonbProblem(it.Payload); p != "" {
				t.Errorf("payload %q: %s", it.Payload, p)
			}
		})
	}
}

func TestSanitizePayload(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{``, `null`},
		{`{"a":1}`, `{"a":1}`},
		{`"\ud800x"`, `"` + "\uFFFDx" + `"`},
		{`"\u2028"`, `"\u2028"`}, // Go keeps U+2028 escaped; jsonb accepts it
	} {
		got, err := sanitizePayload(json.RawMessage(c.in), "p")
		if err != nil || string(got) != c.want {
			t.Errorf("sanitizePayload(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	_, err := sanitizePayload(json.RawMessage(`{"\u0000":1}`), "items[3].payload")
	wantBad(t, err, `items[3].payload must not contain the character \u0000`)
	_, err = sanitizePayload(json.RawMessage(`{"a":"\u00e9",}`), "x.payload")
	wantBad(t, err, "x.payload is not valid JSON")
}

func decodeOneAck(t *testing.T, body string) (persistence.AckItem, error) {
	t.Helper()
	var raw ackJSON
	if err := parseBody([]byte(body), &raw); err != nil {
		return persistence.AckItem{}, err
	}
	return decodeAck(&raw, "", "")
}

func TestDecodeAckErrors(t *testing.T) {
	ack := func(extra string) string { return `{"transactionId":"t","partitionId":"` + uuidA + `"` + extra + `}` }
	cases := []struct{ name, body, want string }{
		{"empty body", ``, "Empty request body"},
		{"invalid JSON", `{"transactionId":`, "Invalid JSON: unexpected end of JSON input"},
		{"null body", `null`, "request body must be a JSON object"},
		{"no fields", `{}`, "transactionId is required"},
		{"transactionId empty", `{"transactionId":"","partitionId":"` + uuidA + `"}`, "transactionId is required"},
		{"transactionId number", `{"transactionId":5,"partitionId":"` + uuidA + `"}`, "transactionId must be a string"},
		{"captured: partitionId missing", capturedAck[1], "partitionId is required to ensure message uniqueness"},
		{"partitionId empty", `{"transactionId":"t","partitionId":""}`, "partitionId is required to ensure message uniqueness"},
		{"partitionId number", `{"transactionId":"t","partitionId":5}`, "partitionId is required to ensure message uniqueness"},
		{"partitionId not a UUID", `{"transactionId":"t","partitionId":"nope"}`, "partitionId must be a UUID"},
		{"status unknown", ack(`,"status":"bogus"`), "status must be one of completed, success, failed, retry, dlq"},
		{"status empty", ack(`,"status":""`), "status must be one of completed, success, failed, retry, dlq"},
		{"status case", ack(`,"status":"Completed"`), "status must be one of completed, success, failed, retry, dlq"},
		{"status number", ack(`,"status":1`), "status must be a string"},
		{"consumerGroup number", ack(`,"consumerGroup":5`), "consumerGroup must be a string"},
		{"consumerGroup 256", ack(`,"consumerGroup":"` + name256 + `"`), "consumerGroup must be at most 255 characters"},
		{"leaseId number", ack(`,"leaseId":5`), "leaseId must be a string"},
		{"error object", ack(`,"error":{"m":"x"}`), "error must be a string"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := decodeOneAck(t, c.body)
			wantBad(t, err, c.want)
		})
	}
}

func TestDecodeAck(t *testing.T) {
	a, err := decodeOneAck(t, capturedAck[0])
	if err != nil {
		t.Fatal(err)
	}
	want := persistence.AckItem{
		PartitionID:   uuid.MustParse(uuidA),
		TransactionID: "2446b6cc-6883-433e-b319-8f0aa16baf11",
		Group:         persistence.QueueMode,
		LeaseID:       "01a22895-3190-7000-9943-719b6530c540",
		Status:        persistence.AckCompleted,
	}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("captured ack = %+v, want %+v", a, want)
	}
	a, err = decodeOneAck(t, capturedAck[3])
	if err != nil || a.Status != persistence.AckFailed || a.Error != "boom2" || a.TransactionID != "tx-2" {
		t.Errorf("captured failed ack = %+v, %v", a, err)
	}

	ack := func(extra string) string { return `{"transactionId":"t","partitionId":"` + uuidA + `"` + extra + `}` }
	for _, c := range []struct {
		extra  string
		status persistence.AckStatus
		group  string
	}{
		{``, "completed", "__QUEUE_MODE__"},
		{`,"status":null,"consumerGroup":null`, "completed", "__QUEUE_MODE__"},
		{`,"status":"success","consumerGroup":""`, "completed", "__QUEUE_MODE__"},
		{`,"status":"completed","consumerGroup":"g"`, "completed", "g"},
		{`,"status":"failed"`, "failed", "__QUEUE_MODE__"},
		{`,"status":"dlq"`, "dlq", "__QUEUE_MODE__"},
		{`,"status":"retry","consumerGroup":"` + name255 + `"`, "retry", name255},
	} {
		a, err := decodeOneAck(t, ack(c.extra))
		if err != nil || a.Status != c.status || a.Group != c.group {
			t.Errorf("%s: status %q group %q err %v; want %q %q", c.extra, a.Status, a.Group, err, c.status, c.group)
		}
	}
	// Any form uuid.Parse accepts names the same partition.
	for _, pid := range []string{strings.ToUpper(uuidA), strings.ReplaceAll(uuidA, "-", ""), "{" + uuidA + "}", "urn:uuid:" + uuidA} {
		a, err := decodeOneAck(t, `{"transactionId":"t","partitionId":"`+pid+`"}`)
		if err != nil || a.PartitionID != uuid.MustParse(uuidA) {
			t.Errorf("partitionId %q: %v, %v", pid, a.PartitionID, err)
		}
	}
}

func TestDecodeAckBatch(t *testing.T) {
	one := func(tx, extra string) string {
		return `{"transactionId":"` + tx + `","partitionId":"` + uuidA + `"` + extra + `}`
	}
	t.Run("captured", func(t *testing.T) {
		acks, err := decodeAckBatch([]byte(capturedAckBatch[0]))
		if err != nil || len(acks) != 2 {
			t.Fatalf("%v, %v", acks, err)
		}
		if acks[0].Status != "completed" || acks[1].Status != "failed" || acks[1].Error != "boom" ||
			acks[0].Group != persistence.QueueMode || acks[1].LeaseID != "01a22895-3e93-7000-83a7-68ece059fce8" {
			t.Errorf("acks = %+v", acks)
		}
	})
	t.Run("top-level group overrides each item", func(t *testing.T) {
		acks, err := decodeAckBatch([]byte(`{"consumerGroup":"top","acknowledgments":[` +
			one("a", `,"consumerGroup":"mine"`) + "," + one("b", "") + "," + one("c", `,"consumerGroup":7`) + `]}`))
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range acks {
			if a.Group != "top" {
				t.Errorf("ack %d group %q, want top", i, a.Group)
			}
		}
	})
	t.Run("empty top-level group leaves each item's", func(t *testing.T) {
		for _, top := range []string{``, `"consumerGroup":"",`, `"consumerGroup":null,`} {
			acks, err := decodeAckBatch([]byte(`{` + top + `"acknowledgments":[` + one("a", `,"consumerGroup":"mine"`) + "," + one("b", "") + `]}`))
			if err != nil || acks[0].Group != "mine" || acks[1].Group != persistence.QueueMode {
				t.Errorf("%s: %+v, %v", top, acks, err)
			}
		}
	})
	t.Run("status success", func(t *testing.T) {
		acks, err := decodeAckBatch([]byte(`{"acknowledgments":[` + one("a", `,"status":"success"`) + `]}`))
		if err != nil || acks[0].Status != persistence.AckCompleted {
			t.Errorf("%+v, %v", acks, err)
		}
	})
	t.Run("empty", func(t *testing.T) {
		acks, err := decodeAckBatch([]byte(`{"acknowledgments":[]}`))
		if err != nil || acks == nil || len(acks) != 0 {
			t.Errorf("%v, %v; want an empty, non-nil slice", acks, err)
		}
	})
	for _, c := range []struct{ name, body, want string }{
		{"empty body", ``, "Empty request body"},
		{"no acknowledgments", `{}`, "acknowledgments array is required"},
		{"acknowledgments null", `{"acknowledgments":null}`, "acknowledgments array is required"},
		{"acknowledgments object", `{"acknowledgments":{}}`, "acknowledgments array is required"},
		{"acknowledgment not an object", `{"acknowledgments":[1]}`, "acknowledgments array is required"},
		{"top-level group number", `{"consumerGroup":5,"acknowledgments":[]}`, "consumerGroup must be a string"},
		{"second item no partitionId", `{"acknowledgments":[` + one("a", "") + `,{"transactionId":"b"}]}`,
			"acknowledgments[1].partitionId is required to ensure message uniqueness"},
		{"item no transactionId", `{"acknowledgments":[{}]}`, "acknowledgments[0].transactionId is required"},
		{"item bad partitionId", `{"acknowledgments":[{"transactionId":"a","partitionId":"x"}]}`, "acknowledgments[0].partitionId must be a UUID"},
		{"item bad status", `{"acknowledgments":[` + one("a", "") + "," + one("b", "") + "," + one("c", `,"status":"nope"`) + `]}`,
			"acknowledgments[2].status must be one of completed, success, failed, retry, dlq"},
		{"item group number", `{"acknowledgments":[` + one("a", `,"consumerGroup":[]`) + `]}`, "acknowledgments[0].consumerGroup must be a string"},
		{"item error number", `{"acknowledgments":[` + one("a", `,"error":1`) + `]}`, "acknowledgments[0].error must be a string"},
	} {
		t.Run(c.name, func(t *testing.T) {
			acks, err := decodeAckBatch([]byte(c.body))
			if acks != nil {
				t.Fatalf("acks = %v, want nil", acks)
			}
			wantBad(t, err, c.want)
		})
	}
}

func TestDecodeTransaction(t *testing.T) {
	t.Run("captured", func(t *testing.T) {
		ops, err := decodeTransaction([]byte(capturedTransaction[0]))
		if err != nil || len(ops) != 2 {
			t.Fatalf("%v, %v", ops, err)
		}
		want := persistence.AckItem{PartitionID: uuid.MustParse("ca17a188-988a-4ab5-9b65-ebc7107d3c87"), TransactionID: "src-1",
			Group: persistence.QueueMode, LeaseID: "01a22895-9bfe-7000-9cd0-628326857f33", Status: "completed"}
		if ops[0].push != nil || ops[0].ack == nil || !reflect.DeepEqual(*ops[0].ack, want) {
			t.Errorf("op 0 = %+v, want ack %+v", ops[0], want)
		}
		if ops[1].ack != nil || len(ops[1].push) != 1 {
			t.Fatalf("op 1 = %+v, want one push item", ops[1])
		}
		it := ops[1].push[0]
		if it.sentQueue != "txdst" || it.Partition != "Default" || string(it.Payload) != `{"processed":true}` {
			t.Errorf("push item = %+v", it)
		}
		if _, err := uuid.Parse(it.TransactionID); err != nil {
			t.Errorf("generated transactionId %q", it.TransactionID)
		}
	})
	t.Run("requiredLeases prove the leases of acks without leaseId", func(t *testing.T) {
		lease := "01a22895-9bfe-7000-9cd0-628326857f33"
		body := `{"operations":[
			{"type":"ack","transactionId":"a","partitionId":"` + uuidA + `","status":"completed"},
			{"type":"ack","transactionId":"b","partitionId":"` + uuidA + `","leaseId":"own"}],
			"requiredLeases":["` + strings.ToUpper(lease) + `","",null]}`
		ops, err := decodeTransaction([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if got := ops[0].ack.HeldLeases; !reflect.DeepEqual(got, []string{lease}) {
			t.Errorf("ack without leaseId holds %q, want [%s]", got, lease)
		}
		if got := ops[1].ack; got.HeldLeases != nil || got.LeaseID != "own" {
			t.Errorf("ack with its own leaseId = %+v, want that lease alone", got)
		}
	})
	for _, c := range []struct{ name, leases, want string }{
		{"not an array", `"x"`, "requiredLeases must be an array"},
		{"a number", `[1]`, "requiredLeases[0] must be a string"},
		{"not a UUID", `["` + uuidA + `","lease"]`, "requiredLeases[1] must be a lease id (a UUID)"},
	} {
		t.Run("requiredLeases "+c.name, func(t *testing.T) {
			_, err := decodeTransaction([]byte(`{"operations":[{"type":"push","queue":"q"}],"requiredLeases":` + c.leases + `}`))
			wantBad(t, err, c.want)
		})
	}
	t.Run("single-item push form with data", func(t *testing.T) {
		ops, err := decodeTransaction([]byte(`{"operations":[{"type":"push","queue":"q","partition":"p","data":{"x":1},"transactionId":"t1","traceId":"` + uuidT + `"}]}`))
		if err != nil || len(ops) != 1 || ops[0].ack != nil || len(ops[0].push) != 1 {
			t.Fatalf("%+v, %v", ops, err)
		}
		it := ops[0].push[0]
		if it.sentQueue != "q" || it.Partition != "p" || it.TransactionID != "t1" || string(it.Payload) != `{"x":1}` ||
			it.TraceID != (uuid.NullUUID{UUID: uuid.MustParse(uuidT), Valid: true}) {
			t.Errorf("item = %+v", it)
		}
	})
	t.Run("single-item push form defaults", func(t *testing.T) {
		ops, err := decodeTransaction([]byte(`{"operations":[{"type":"push","queue":"q"}]}`))
		if err != nil || len(ops[0].push) != 1 {
			t.Fatalf("%+v, %v", ops, err)
		}
		if it := ops[0].push[0]; it.Partition != "Default" || string(it.Payload) != "null" {
			t.Errorf("item = %+v", it)
		}
	})
	t.Run("items form with data and payload", func(t *testing.T) {
		ops, err := decodeTransaction([]byte(`{"operations":[{"type":"push","items":[{"queue":"a","data":[1,2]},{"queue":"b","payload":"\ud800"}]}]}`))
		if err != nil || len(ops[0].push) != 2 {
			t.Fatalf("%+v, %v", ops, err)
		}
		if p := string(ops[0].push[0].Payload); p != `[1,2]` {
			t.Errorf("data payload = %s", p)
		}
		if p := string(ops[0].push[1].Payload); p != `"`+"\uFFFD"+`"` {
			t.Errorf("lone surrogate payload = %s", p)
		}
	})
	t.Run("items win over the inline item", func(t *testing.T) {
		ops, err := decodeTransaction([]byte(`{"operations":[{"type":"push","queue":"inline","items":[{"queue":"listed"}]}]}`))
		if err != nil || len(ops[0].push) != 1 || ops[0].push[0].sentQueue != "listed" {
			t.Errorf("%+v, %v", ops, err)
		}
	})
	t.Run("ack op defaults", func(t *testing.T) {
		ops, err := decodeTransaction([]byte(`{"operations":[{"type":"ack","transactionId":"t","partitionId":"` + uuidA + `","status":"success","consumerGroup":""}]}`))
		if err != nil || ops[0].ack == nil || ops[0].ack.Status != "completed" || ops[0].ack.Group != persistence.QueueMode {
			t.Errorf("%+v, %v", ops, err)
		}
	})
	for _, c := range []struct{ name, body, want string }{
		{"empty body", ``, "Empty request body"},
		{"no operations", `{}`, "operations array required"},
		{"operations null", `{"operations":null}`, "operations array required"},
		{"operations object", `{"operations":{}}`, "operations array required"},
		{"captured: empty operations", capturedTransaction[2], "operations array cannot be empty"},
		{"operation number", `{"operations":[5]}`, "operations[0] must be an object"},
		{"operation null", `{"operations":[{"type":"push","queue":"q"},null]}`, "operations[1] must be an object"},
		{"operation array", `{"operations":[[]]}`, "operations[0] must be an object"},
		{"type missing", `{"operations":[{}]}`, "operations[0].type must be push or ack"},
		{"type unknown", `{"operations":[{"type":"pop"}]}`, "operations[0].type must be push or ack"},
		{"type number", `{"operations":[{"type":1}]}`, "operations[0].type must be a string"},
		{"ack no transactionId", `{"operations":[{"type":"ack"}]}`, "operations[0].transactionId is required"},
		{"ack no partitionId", `{"operations":[{"type":"ack","transactionId":"t"}]}`, "operations[0].partitionId is required to ensure message uniqueness"},
		{"ack bad status", `{"operations":[{"type":"ack","transactionId":"t","partitionId":"` + uuidA + `","status":"x"}]}`,
			"operations[0].status must be one of completed, success, failed, retry, dlq"},
		{"push inline no queue", `{"operations":[{"type":"push"}]}`, "operations[0].queue is required"},
		{"push inline queue number", `{"operations":[{"type":"push","queue":5}]}`, "operations[0].queue must be a string"},
		{"push inline bad trace", `{"operations":[{"type":"push","queue":"q","traceId":"nope"}]}`, "operations[0].traceId must be a UUID"},
		{"push inline NUL payload", `{"operations":[{"type":"push","queue":"q","payload":"\u0000"}]}`, `operations[0].payload must not contain the character \u0000`},
		{"push items object", `{"operations":[{"type":"push","items":{}}]}`, "operations[0].items must be an array"},
		{"push items null", `{"operations":[{"type":"push","items":null}]}`, "operations[0].items must be an array"},
		{"push items of numbers", `{"operations":[{"type":"push","items":[1]}]}`, "operations[0].items must be an array"},
		{"push items empty", `{"operations":[{"type":"push","items":[]}]}`, "operations[0].items must not be empty"},
		{"push item queue number", `{"operations":[{"type":"push","queue":"q"},{"type":"push","items":[{"queue":"q"},{"queue":5}]}]}`,
			"operations[1].items[1].queue must be a string"},
		{"push item bad trace", `{"operations":[{"type":"push","items":[{"queue":"q"},{"queue":"q","traceId":"nope"}]}]}`,
			"operations[0].items[1].traceId must be a UUID"},
		{"push item partition 256", `{"operations":[{"type":"push","items":[{"queue":"q","partition":"` + name256 + `"}]}]}`,
			"operations[0].items[0].partition must be at most 255 characters"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ops, err := decodeTransaction([]byte(c.body))
			if ops != nil {
				t.Fatalf("ops = %+v, want nil", ops)
			}
			wantBad(t, err, c.want)
		})
	}
}

// TestDecodeKeepsWhatJSONBCannotStoreOut pins the fixes of decoder bugs found by fuzzing: each
// input once reached PostgreSQL and failed the whole fused call. Each case names the bug.
func TestDecodeKeepsWhatJSONBCannotStoreOut(t *testing.T) {
	t.Run("payload with invalid UTF-8 and no escape reaches jsonb", func(t *testing.T) {
		items, err := decodePush([]byte("{\"items\":[{\"queue\":\"q\",\"payload\":{\"k\":\"a\xffb\"}}]}"))
		if err == nil {
			if p := jsonbProblem(items[0].Payload); p != "" {
				t.Errorf("payload %q accepted: %s", items[0].Payload, p)
			}
		} else {
			var bad *badRequest
			if !errors.As(err, &bad) {
				t.Errorf("error %v is not a badRequest", err)
			}
		}
	})
	t.Run("payload number beyond numeric range reaches jsonb", func(t *testing.T) {
		for _, n := range []string{"1e131072", "1e-16384", "0e-20000"} {
			items, err := decodePush([]byte(`{"items":[{"queue":"q","payload":{"n":` + n + `}}]}`))
			if err == nil {
				t.Errorf("payload number %s accepted as %s; jsonb refuses it (value overflows numeric format)", n, items[0].Payload)
			}
		}
	})
	t.Run("payload with an escape loses number precision", func(t *testing.T) {
		it := pushOne(t, `{"queue":"q","payload":{"id":12345678901234567890,"s":"\u00e9"}}`)
		if string(it.Payload) != `{"id":12345678901234567890,"s":"é"}` {
			t.Errorf("payload = %s, want the id kept exactly", it.Payload)
		}
	})
	t.Run("payload with an escape refuses numbers beyond float64", func(t *testing.T) {
		items, err := decodePush([]byte(`{"items":[{"queue":"q","payload":[1e400,"\u00e9"]}]}`))
		if err != nil {
			t.Errorf("refused with %v; jsonb accepts 1e400 (and does without the escape)", err)
		} else if string(items[0].Payload) != `[1e400,"é"]` {
			t.Errorf("payload = %s", items[0].Payload)
		}
	})
	t.Run("escaped backslash before u0000 is not a NUL", func(t *testing.T) {
		// The JSON string "\\u0000" is the six characters \u0000, which jsonb stores fine.
		items, err := decodePush([]byte(`{"items":[{"queue":"q","payload":"\\u0000"}]}`))
		if err != nil {
			t.Errorf("refused with %v", err)
		} else if string(items[0].Payload) != `"\\u0000"` {
			t.Errorf("payload = %s", items[0].Payload)
		}
	})
	t.Run("U+0000 in a text field reaches PostgreSQL", func(t *testing.T) {
		bodies := map[string]func([]byte) error{
			`{"items":[{"queue":"q\u0000"}]}`:                                                                     func(b []byte) error { _, err := decodePush(b); return err },
			`{"items":[{"queue":"q","partition":"\u0000"}]}`:                                                      func(b []byte) error { _, err := decodePush(b); return err },
			`{"items":[{"queue":"q","transactionId":"t\u0000"}]}`:                                                 func(b []byte) error { _, err := decodePush(b); return err },
			`{"transactionId":"t\u0000","partitionId":"` + uuidA + `"}`:                                           func(b []byte) error { _, err := decodeOneAck(t, string(b)); return err },
			`{"transactionId":"t","partitionId":"` + uuidA + `","consumerGroup":"\u0000"}`:                        func(b []byte) error { _, err := decodeOneAck(t, string(b)); return err },
			`{"transactionId":"t","partitionId":"` + uuidA + `","status":"failed","error":"x\u0000"}`:             func(b []byte) error { _, err := decodeOneAck(t, string(b)); return err },
			`{"consumerGroup":"g\u0000","acknowledgments":[{"transactionId":"t","partitionId":"` + uuidA + `"}]}`: func(b []byte) error { _, err := decodeAckBatch(b); return err },
			`{"operations":[{"type":"push","queue":"q\u0000"}]}`:                                                  func(b []byte) error { _, err := decodeTransaction(b); return err },
		}
		for body, decode := range bodies {
			var bad *badRequest
			if err := decode([]byte(body)); !errors.As(err, &bad) {
				t.Errorf("%s: err = %v, want a 400 (PostgreSQL text refuses U+0000)", body, err)
			}
		}
	})
}

// The fuzz oracle's model of jsonb, checked against PostgreSQL 15.18.
func TestJSONBProblemModel(t *testing.T) {
	ok := []string{`null`, `"\\u0000"`, `"\ud800\udc00"`, `"\u00e9\u2028"`, `1e131071`, `9.9e131071`, `0.1e131072`,
		`-1e131071`, `1e-16383`, `1.5e-16382`, `1.000e-16380`, `0e200000`, `[1e1001,{"a":-0}]`, `12345678901234567890`}
	bad := []string{`"\u0000"`, `{"\u0000":1}`, `"\ud800"`, `"\udc00"`, `"\ud800\ud800"`, `["\udfff"]`, "\"\xff\"",
		`1e131072`, `10e131071`, `1e-16384`, `1.5e-16383`, `0e-20000`, `0.0e-16383`, `100e-16385`, `1e99999999999999999999`}
	for _, s := range ok {
		if p := jsonbProblem([]byte(s)); p != "" {
			t.Errorf("%s: %s, want accepted", s, p)
		}
	}
	for _, s := range bad {
		if jsonbProblem([]byte(s)) == "" {
			t.Errorf("%s accepted, want refused", s)
		}
	}
}

package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"

	"queen/persistence"
)

// The fuzz targets below feed arbitrary HTTP bodies to the decoders and check what the decoders
// promise, not just that they do not panic:
//
//   - every error is a *badRequest (answered 400), never another error type;
//   - on success every value bound for PostgreSQL is one PostgreSQL accepts. Names and other text
//     parameters are non-empty where required, at most maxName runes where limited, valid UTF-8
//     and free of U+0000 (text refuses it). Payloads are valid JSON that jsonb accepts: valid
//     UTF-8, no \u0000 escape, no unpaired surrogate escape, numbers within numeric's range
//     (persistence.PushItem promises "nothing here can make PostgreSQL refuse the statement");
//   - a payload keeps its value: it decodes to what the client sent (Go's decoding, which maps
//     lone surrogates and invalid UTF-8 to U+FFFD), numbers compared exactly;
//   - the decoders never set what the client must not control (ProducerSub, Encrypted).
//
// A failing input found by `go test -fuzz` is kept under testdata/fuzz/<Target>/ and replays on
// every `go test`.

// Bodies as the official clients send them (captured from real exchanges).
var (
	capturedPush = []string{
		`{"items":[{"queue":"demo","payload":{"hello":"world"}}]}`,
		`{"items":[{"queue":"orders","partition":"p1","payload":{"n":1},"transactionId":"tx-1"},{"queue":"orders","partition":"p1","payload":{"n":2},"transactionId":"tx-2","traceId":"11111111-2222-3333-4444-555555555555"},{"queue":"orders","partition":"p2","payload":{"n":3}}]}`,
		`{"items":[{"queue":"orders","partition":"p1","payload":{"n":1},"transactionId":"tx-1"}]}`,
	}
	capturedAck = []string{
		`{"transactionId":"2446b6cc-6883-433e-b319-8f0aa16baf11","partitionId":"506e4cec-03e5-43ce-aa15-d08e99d5eaf8","leaseId":"01a22895-3190-7000-9943-719b6530c540","status":"completed"}`,
		`{"transactionId":"tx-1"}`,
		`{"transactionId":"nope","partitionId":"506e4cec-03e5-43ce-aa15-d08e99d5eaf8"}`,
		`{"transactionId":"tx-2","partitionId":"cbb8dc0e-77f4-4d18-8ff7-a4d3ea4ea202","leaseId":"01a22895-4814-7000-b3e3-4494ff776790","status":"failed","error":"boom2"}`,
	}
	capturedAckBatch = []string{
		`{"acknowledgments":[{"transactionId":"tx-1","partitionId":"cbb8dc0e-77f4-4d18-8ff7-a4d3ea4ea202","leaseId":"01a22895-3e93-7000-83a7-68ece059fce8","status":"completed"},{"transactionId":"tx-2","partitionId":"cbb8dc0e-77f4-4d18-8ff7-a4d3ea4ea202","leaseId":"01a22895-3e93-7000-83a7-68ece059fce8","status":"failed","error":"boom"}]}`,
	}
	capturedTransaction = []string{
		`{"operations":[{"type":"ack","transactionId":"src-1","partitionId":"ca17a188-988a-4ab5-9b65-ebc7107d3c87","leaseId":"01a22895-9bfe-7000-9cd0-628326857f33","status":"completed"},{"type":"push","items":[{"queue":"txdst","partition":"Default","payload":{"processed":true}}]}]}`,
		`{"operations":[{"type":"ack","transactionId":"src-1","partitionId":"ca17a188-988a-4ab5-9b65-ebc7107d3c87","status":"completed"},{"type":"push","items":[{"queue":"txdst","payload":{"processed":2}}]}]}`,
		`{"operations":[]}`,
	}
)

// Bodies every decoder should survive.
var garbageBodies = []string{
	``, ` `, "\n\t", `null`, `[]`, `{}`, `""`, `0`, `true`, `{`, `}`, `[`, `{"`, `{"a":}`, `{}}`,
	`{"items":[]}{}`, "\x00", "\xff\xfe", `[[[[[[[[[[]]]]]]]]]]`, `{"a":{"b":{"c":[{"d":[[{}]]}]}}}`,
	`{"items":[[[[]]]],"acknowledgments":{"x":[null]},"operations":[[{"type":{}}]]}`,
	`1e999999999`, `-0`, `"\ud800"`, `{"\u0000":1}`,
}

const (
	uuidA = "506e4cec-03e5-43ce-aa15-d08e99d5eaf8"
	uuidT = "11111111-2222-3333-4444-555555555555"
)

var (
	name255 = strings.Repeat("q", 255)
	name256 = strings.Repeat("q", 256)
	rune255 = strings.Repeat("é", 255) // 510 bytes, 255 runes: allowed
)

func addSeeds(f *testing.F, groups ...[]string) {
	for _, g := range groups {
		for _, s := range g {
			f.Add([]byte(s))
		}
	}
}

func FuzzDecodePush(f *testing.F) {
	item := func(fields string) string { return `{"items":[` + fields + `]}` }
	addSeeds(f, capturedPush, garbageBodies, []string{
		`{"items":[]}`, `{"items":null}`, `{"items":{}}`, `{"items":"x"}`, `{"items":[1]}`, `{"items":[null]}`,
		item(`{}`), item(`{"queue":5}`), item(`{"queue":["q"]}`), item(`{"queue":{"a":1}}`), item(`{"queue":""}`),
		item(`{"queue":"q","partition":""}`), item(`{"queue":"q","partition":7}`), item(`{"queue":"q","partition":null}`),
		item(`{"queue":"` + name255 + `","partition":"` + name255 + `","transactionId":"` + name255 + `"}`),
		item(`{"queue":"` + name256 + `"}`), item(`{"queue":"q","partition":"` + name256 + `"}`),
		item(`{"queue":"q","transactionId":"` + name256 + `"}`), item(`{"queue":"` + rune255 + `"}`),
		item(`{"queue":"q","transactionId":5}`), item(`{"queue":"q","transactionId":""}`),
		item(`{"queue":"q","traceId":"not-a-uuid"}`), item(`{"queue":"q","traceId":"` + uuidT + `"}`),
		item(`{"queue":"q","traceId":5}`), item(`{"queue":"q","traceId":""}`),
		item(`{"queue":"q","traceId":"{` + uuidT + `}"}`), item(`{"queue":"q","traceId":"urn:uuid:` + uuidT + `"}`),
		item(`{"queue":"q","payload":"\u0000"}`), item(`{"queue":"q","payload":{"a":["x\u0000y"]}}`),
		item(`{"queue":"q","payload":{"\u0000":1}}`), item(`{"queue":"q","payload":"\\u0000"}`),
		item(`{"queue":"q","payload":"\ud800"}`), item(`{"queue":"q","payload":{"s":"a\udc00b","t":"\ud83d\ude00"}}`),
		item(`{"queue":"q","payload":["\ud800\ud800","\udfff"]}`), item(`{"queue":"q","payload":"\u00e9\u2028<>&"}`),
		item(`{"queue":"q","payload":1e308}`), item(`{"queue":"q","payload":{"n":1e999999}}`), item(`{"queue":"q","payload":-1.5e-300}`), item(`{"queue":"q","payload":1e400}`),
		item(`{"queue":"q","payload":[1.10,"\u00e9"]}`), item(`{"queue":"q","payload":{"id":9007199254740993,"s":"\u00e9"}}`),
		item(`{"queue":"q","payload":null}`), item(`{"queue":"q","payload":[]}`), item(`{"queue":"q","payload":""}`),
		item(`{"queue":"q","data":{"x":1}}`), item(`{"queue":"q","payload":{"a":1},"data":{"b":2}}`),
		item(`{"queue":"q","payload":{"a":{"b":{"c":{"d":[[[[{"e":null}]]]]}}}}}`),
		item(`{"QUEUE":"q","Payload":1}`), item(`{"queue":"q","queue":"r"}`),
		item(`{"queue":"q"},{"queue":"r","partition":"p"},{"queue":5}`),
	})
	f.Fuzz(func(t *testing.T, body []byte) {
		items, err := decodePush(body)
		if err != nil {
			requireBadRequest(t, body, err)
			if items != nil {
				t.Fatalf("decodePush(%q) returned items with an error", body)
			}
			return
		}
		var in struct{ Items []pushItemJSON }
		if e := json.Unmarshal(body, &in); e != nil {
			t.Fatalf("decodePush accepted %q, which does not decode as a push body: %v", body, e)
		}
		if len(items) != len(in.Items) {
			t.Fatalf("decodePush(%q): %d items for %d in the body", body, len(items), len(in.Items))
		}
		for i := range items {
			checkPushItem(t, body, "items["+strconv.Itoa(i)+"]", items[i], &in.Items[i], false)
		}
	})
}

func FuzzDecodeAck(f *testing.F) {
	ack := func(extra string) string {
		return `{"transactionId":"t","partitionId":"` + uuidA + `"` + extra + `}`
	}
	addSeeds(f, capturedAck, garbageBodies, []string{
		ack(``), ack(`,"status":"success"`), ack(`,"status":"failed","error":"boom"`), ack(`,"status":"dlq"`),
		ack(`,"status":"retry"`), ack(`,"status":"bogus"`), ack(`,"status":""`), ack(`,"status":1`), ack(`,"status":null`),
		ack(`,"consumerGroup":""`), ack(`,"consumerGroup":"g"`), ack(`,"consumerGroup":"` + name255 + `"`),
		ack(`,"consumerGroup":"` + name256 + `"`), ack(`,"consumerGroup":5`), ack(`,"consumerGroup":"g\u0000"`),
		ack(`,"leaseId":5`), ack(`,"leaseId":"01a22895-3190-7000-9943-719b6530c540"`), ack(`,"error":{"x":1}`),
		ack(`,"error":"\ud800 \u0000"`), ack(`,"transactionId":"` + name256 + name256 + `"`),
		`{"partitionId":"` + uuidA + `"}`, `{"transactionId":5,"partitionId":"` + uuidA + `"}`,
		`{"transactionId":"","partitionId":"` + uuidA + `"}`, `{"transactionId":"t","partitionId":5}`,
		`{"transactionId":"t","partitionId":"nope"}`, `{"transactionId":"t","partitionId":""}`,
		`{"transactionId":"t","partitionId":"00000000-0000-0000-0000-000000000000"}`,
		`{"transactionId":"t","partitionId":"506E4CEC03E543CEAA15D08E99D5EAF8"}`,
		`{"transactionId":"t","partitionId":"{` + uuidA + `}"}`, `{"TRANSACTIONID":"t","PartitionId":"` + uuidA + `"}`,
		`{"transactionId":"t\u0000","partitionId":"` + uuidA + `"}`,
	})
	f.Fuzz(func(t *testing.T, body []byte) {
		var raw ackJSON
		if err := parseBody(body, &raw); err != nil {
			requireBadRequest(t, body, err)
			return
		}
		a, err := decodeAck(&raw, "", "")
		if err != nil {
			requireBadRequest(t, body, err)
			return
		}
		checkAck(t, body, "ack", a, &raw, "")
	})
}

func FuzzDecodeAckBatch(f *testing.F) {
	one := `{"transactionId":"t","partitionId":"` + uuidA + `"}`
	addSeeds(f, capturedAckBatch, garbageBodies, []string{
		`{"acknowledgments":[]}`, `{"acknowledgments":null}`, `{"acknowledgments":{}}`, `{"acknowledgments":[1]}`,
		`{"acknowledgments":[` + one + `,{}]}`, `{"consumerGroup":"top","acknowledgments":[` + one + `]}`,
		`{"consumerGroup":"top","acknowledgments":[{"transactionId":"t","partitionId":"` + uuidA + `","consumerGroup":"mine"}]}`,
		`{"consumerGroup":"","acknowledgments":[{"transactionId":"t","partitionId":"` + uuidA + `","consumerGroup":"mine"}]}`,
		`{"consumerGroup":5,"acknowledgments":[` + one + `]}`, `{"consumerGroup":null,"acknowledgments":[` + one + `]}`,
		`{"consumerGroup":"` + name256 + `","acknowledgments":[` + one + `]}`,
		`{"consumerGroup":"` + name256 + `","acknowledgments":[]}`,
		`{"consumerGroup":"top","acknowledgments":[{"transactionId":"t","partitionId":"` + uuidA + `","consumerGroup":7}]}`,
		`{"acknowledgments":[` + one + `,{"transactionId":"u","partitionId":"` + uuidA + `","status":"success"},{"transactionId":"v","partitionId":"` + uuidA + `","status":"nope"}]}`,
		`{"consumerGroup":"g\u0000","acknowledgments":[` + one + `]}`,
	})
	f.Fuzz(func(t *testing.T, body []byte) {
		acks, err := decodeAckBatch(body)
		if err != nil {
			requireBadRequest(t, body, err)
			if acks != nil {
				t.Fatalf("decodeAckBatch(%q) returned acks with an error", body)
			}
			return
		}
		var in struct {
			ConsumerGroup   json.RawMessage
			Acknowledgments []ackJSON
		}
		if e := json.Unmarshal(body, &in); e != nil {
			t.Fatalf("decodeAckBatch accepted %q, which does not decode as an ack batch: %v", body, e)
		}
		if len(acks) != len(in.Acknowledgments) {
			t.Fatalf("decodeAckBatch(%q): %d acks for %d in the body", body, len(acks), len(in.Acknowledgments))
		}
		var top string
		if len(in.ConsumerGroup) > 0 && in.ConsumerGroup[0] == '"' {
			_ = json.Unmarshal(in.ConsumerGroup, &top)
		}
		for i := range acks {
			checkAck(t, body, "acknowledgments["+strconv.Itoa(i)+"]", acks[i], &in.Acknowledgments[i], top)
		}
	})
}

func FuzzDecodeTransaction(f *testing.F) {
	ops := func(o ...string) string { return `{"operations":[` + strings.Join(o, ",") + `]}` }
	ack := `{"type":"ack","transactionId":"t","partitionId":"` + uuidA + `"}`
	addSeeds(f, capturedTransaction, garbageBodies, []string{
		`{"operations":null}`, `{"operations":{}}`, ops(`5`), ops(`null`), ops(`[]`), ops(`{}`), ops(`{"type":5}`),
		ops(`{"type":"nope"}`), ops(`{"type":"ack"}`), ops(ack), ops(ack, ack),
		ops(`{"type":"ack","transactionId":"t","partitionId":"` + uuidA + `","status":"retry","consumerGroup":"g"}`),
		ops(`{"type":"push","queue":"q"}`), ops(`{"type":"push"}`), ops(`{"type":"push","items":[]}`),
		ops(`{"type":"push","items":null}`), ops(`{"type":"push","items":{}}`), ops(`{"type":"push","items":[{}]}`),
		ops(`{"type":"push","queue":"q","partition":"p","data":{"x":1},"transactionId":"t","traceId":"` + uuidT + `"}`),
		ops(`{"type":"push","queue":"q","traceId":"nope"}`),
		ops(`{"type":"push","items":[{"queue":"q"},{"queue":"q","traceId":"nope"}]}`),
		ops(`{"type":"push","items":[{"queue":"q","data":[1,2]},{"queue":"r","payload":"\ud800"}]}`),
		ops(`{"type":"push","queue":"q","items":[{"queue":"r"}]}`), ops(`{"type":"push","queue":"` + name256 + `"}`),
		ops(`{"type":"push","queue":"q","payload":"\u0000"}`), ops(`{"type":"ack","queue":"q","items":[1]}`),
		ops(ack, `{"type":"push","items":[{"queue":"q","payload":{"id":12345678901234567890,"s":"\u00e9"}}]}`),
		`{"operations":[` + ack + `],"requiredLeases":["` + uuidT + `",null,""]}`,
		`{"operations":[` + ack + `],"requiredLeases":{}}`, `{"operations":[` + ack + `],"requiredLeases":["x"]}`,
	})
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := decodeTransaction(body)
		if err != nil {
			requireBadRequest(t, body, err)
			if got != nil {
				t.Fatalf("decodeTransaction(%q) returned operations with an error", body)
			}
			return
		}
		var in struct{ Operations []txOpJSON }
		if e := json.Unmarshal(body, &in); e != nil {
			t.Fatalf("decodeTransaction accepted %q, which does not decode as a transaction: %v", body, e)
		}
		if len(got) == 0 || len(got) != len(in.Operations) {
			t.Fatalf("decodeTransaction(%q): %d operations for %d in the body", body, len(got), len(in.Operations))
		}
		for i, op := range got {
			where := "operations[" + strconv.Itoa(i) + "]"
			raw := &in.Operations[i]
			switch {
			case (op.ack == nil) == (op.push == nil):
				t.Fatalf("decodeTransaction(%q): %s has ack=%v and %d push items; want exactly one kind", body, where, op.ack, len(op.push))
			case op.ack != nil:
				checkAck(t, body, where, *op.ack, &ackJSON{
					TransactionID: raw.TransactionID, PartitionID: raw.PartitionID, Status: raw.Status,
					ConsumerGroup: raw.ConsumerGroup, LeaseID: raw.LeaseID, Error: raw.Error,
				}, "")
			default:
				var inItems []pushItemJSON
				if len(raw.Items) == 0 {
					inItems = []pushItemJSON{{Queue: raw.Queue, Partition: raw.Partition, Payload: raw.Payload,
						Data: raw.Data, TransactionID: raw.TransactionID, TraceID: raw.TraceID}}
				} else if e := json.Unmarshal(raw.Items, &inItems); e != nil {
					t.Fatalf("decodeTransaction(%q): %s.items accepted but not an item array: %v", body, where, e)
				}
				if len(op.push) == 0 || len(op.push) != len(inItems) {
					t.Fatalf("decodeTransaction(%q): %s has %d push items for %d in the body", body, where, len(op.push), len(inItems))
				}
				for j := range op.push {
					checkPushItem(t, body, where+".items["+strconv.Itoa(j)+"]", op.push[j], &inItems[j], true)
				}
			}
		}
	})
}

// requireBadRequest fails unless err is a *badRequest with a message.
// The stream cycle body: besides the promises above, state keys are text PostgreSQL takes
// within the key cap, an upsert always carries a value (nil means delete), and the ack is bound
// to the cycle's partition and consumer group with a lease rule from release_lease.
func FuzzDecodeCycle(f *testing.F) {
	base := `"query_id":"` + uuidA + `","partition_id":"` + uuidA + `"`
	cyc := func(rest string) string {
		if rest == "" {
			return "{" + base + "}"
		}
		return "{" + base + "," + rest + "}"
	}
	addSeeds(f, garbageBodies, []string{
		cyc(""), `{"query_id":"x"}`, `{"query_id":5,"partition_id":"` + uuidA + `"}`,
		cyc(`"consumer_group":"streams.q","state_ops":[{"type":"upsert","key":"tumble\u001f1","value":{"count":1,"windowEnd":2}},{"type":"delete","key":"k"}]`),
		cyc(`"state_ops":null,"push_items":null,"ack":null`), cyc(`"state_ops":{}`), cyc(`"state_ops":[1]`),
		cyc(`"state_ops":[{"type":"upsert","key":"k"}]`), cyc(`"state_ops":[{"type":"upsert","key":"k","value":null}]`),
		cyc(`"state_ops":[{"type":"upsert","key":"k","value":"\u0000"}]`), cyc(`"state_ops":[{"type":"delete","key":""}]`),
		cyc(`"state_ops":[{"type":"delete","key":"` + strings.Repeat("é", 600) + `"}]`),
		cyc(`"push_items":[{"queue":"out","partition":"p","payload":{"n":1},"transactionId":"t"}]`),
		cyc(`"push_items":[{"queue":"out","traceId":"nope"}]`), cyc(`"push_items":[{}]`), cyc(`"push_items":"x"`),
		cyc(`"ack":{"transactionId":"t","leaseId":"` + uuidT + `","status":"completed","count":25},"release_lease":false`),
		cyc(`"ack":{"transactionId":"t","status":"dlq","error":"bad"}`), cyc(`"ack":{"transactionId":"t","status":"retry"}`),
		cyc(`"ack":{"transactionId":"t","count":1.5}`), cyc(`"ack":{}`), cyc(`"ack":[]`), cyc(`"release_lease":1`),
	})
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := decodeCycle(body)
		if err != nil {
			requireBadRequest(t, body, err)
			return
		}
		var in struct {
			StateOps  []stateOpJSON  `json:"state_ops"`
			PushItems []pushItemJSON `json:"push_items"`
			Ack       *cycleAckJSON  `json:"ack"`
			Release   *bool          `json:"release_lease"`
		}
		if e := json.Unmarshal(body, &in); e != nil {
			t.Fatalf("decodeCycle accepted %q, which does not decode as a cycle: %v", body, e)
		}
		if len(c.StateOps) != len(in.StateOps) || len(c.push) != len(in.PushItems) {
			t.Fatalf("decodeCycle(%q): %d state ops and %d push items for %d and %d", body, len(c.StateOps), len(c.push), len(in.StateOps), len(in.PushItems))
		}
		for i, op := range c.StateOps {
			where := "state_ops[" + strconv.Itoa(i) + "]"
			if op.Key == "" || len(op.Key) > maxStateKey {
				t.Fatalf("body %q: %s key %q", body, where, op.Key)
			}
			checkText(t, body, where+".key", op.Key)
			var typ string
			_ = json.Unmarshal(in.StateOps[i].Type, &typ)
			if (typ == "upsert") != (op.Value != nil) {
				t.Fatalf("body %q: %s is %q with value %q", body, where, typ, op.Value)
			}
			if op.Value != nil {
				checkPayload(t, body, where+".value", op.Value, in.StateOps[i].Value)
			}
		}
		for i := range c.push {
			checkPushItem(t, body, "push_items["+strconv.Itoa(i)+"]", c.push[i], &in.PushItems[i], true)
		}
		if (c.Ack == nil) != (in.Ack == nil) {
			t.Fatalf("decodeCycle(%q): ack %v", body, c.Ack)
		}
		if c.Ack == nil {
			return
		}
		a := *c.Ack
		checkAck(t, body, "ack", a, &ackJSON{TransactionID: in.Ack.TransactionID, PartitionID: json.RawMessage(`"` + c.PartitionID.String() + `"`),
			Status: in.Ack.Status, LeaseID: in.Ack.LeaseID, Error: in.Ack.Error}, "")
		if a.PartitionID != c.PartitionID || a.Status == persistence.AckRetry || c.ackCount < 0 {
			t.Fatalf("decodeCycle(%q): ack %+v count %d", body, a, c.ackCount)
		}
		keep := in.Release != nil && !*in.Release && a.Status == persistence.AckCompleted
		if want := map[bool]persistence.LeaseAfterAck{true: persistence.LeaseKeep, false: persistence.LeaseRelease}[keep]; a.Lease != want {
			t.Fatalf("decodeCycle(%q): lease rule %v, want %v", body, a.Lease, want)
		}
	})
}

func requireBadRequest(t *testing.T, body []byte, err error) {
	t.Helper()
	var bad *badRequest
	if !errors.As(err, &bad) {
		t.Fatalf("body %q: error %T %q is not a *badRequest (it would be answered 500)", body, err, err)
	}
	if bad.msg == "" {
		t.Fatalf("body %q: badRequest with an empty message", body)
	}
}

// checkText checks a string bound for a PostgreSQL text parameter.
func checkText(t *testing.T, body []byte, where, s string) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Fatalf("body %q: %s = %q is not valid UTF-8", body, where, s)
	}
	if strings.IndexByte(s, 0) >= 0 {
		t.Fatalf("body %q: %s = %q contains U+0000, which PostgreSQL text refuses (SQLSTATE 22021)", body, where, s)
	}
}

// checkName checks a required name of at most maxName runes.
func checkName(t *testing.T, body []byte, where, s string) {
	t.Helper()
	if s == "" {
		t.Fatalf("body %q: %s is empty", body, where)
	}
	if n := utf8.RuneCountInString(s); n > maxName {
		t.Fatalf("body %q: %s has %d runes, more than %d", body, where, n, maxName)
	}
	checkText(t, body, where, s)
}

func checkPushItem(t *testing.T, body []byte, where string, it pushItem, in *pushItemJSON, inTx bool) {
	t.Helper()
	checkName(t, body, where+".queue", it.sentQueue)
	checkName(t, body, where+".partition", it.Partition)
	checkName(t, body, where+".transactionId", it.TransactionID)
	if it.ProducerSub != "" || it.Encrypted {
		t.Fatalf("body %q: %s sets ProducerSub %v / Encrypted %v, which the client must not control", body, where, it.ProducerSub, it.Encrypted)
	}
	switch it.BadTrace {
	case "":
	case "traceId must be a UUID":
		if inTx {
			t.Fatalf("body %q: %s: a transaction push item with a bad traceId must fail the request", body, where)
		}
	default:
		t.Fatalf("body %q: %s: unexpected BadTrace %q", body, where, it.BadTrace)
	}
	if it.TraceID.Valid && it.BadTrace != "" {
		t.Fatalf("body %q: %s has both a valid TraceID and BadTrace %q", body, where, it.BadTrace)
	}
	var trace string
	if len(in.TraceID) > 0 && in.TraceID[0] == '"' {
		_ = json.Unmarshal(in.TraceID, &trace)
	}
	if want := trace != "" && it.BadTrace == ""; it.TraceID.Valid != want {
		t.Fatalf("body %q: %s: traceId %q gave TraceID.Valid=%v, BadTrace=%q", body, where, trace, it.TraceID.Valid, it.BadTrace)
	}
	sent := in.Payload
	if len(sent) == 0 {
		sent = in.Data
	}
	checkPayload(t, body, where+".payload", it.Payload, sent)
}

// checkPayload checks that got is a jsonb-acceptable rendering of the payload the client sent.
func checkPayload(t *testing.T, body []byte, where string, got, sent json.RawMessage) {
	t.Helper()
	if !json.Valid(got) {
		t.Fatalf("body %q: %s = %q is not valid JSON", body, where, got)
	}
	if problem := jsonbProblem(got); problem != "" {
		t.Fatalf("body %q: %s = %q would be refused by jsonb: %s", body, where, got, problem)
	}
	if len(sent) == 0 {
		if string(got) != "null" {
			t.Fatalf("body %q: %s is absent but became %q, want null", body, where, got)
		}
		return
	}
	want, err1 := decodeNumbers(sent)
	have, err2 := decodeNumbers(got)
	if err1 != nil || err2 != nil {
		t.Fatalf("body %q: %s: cannot compare %q with %q: %v / %v", body, where, sent, got, err1, err2)
	}
	if !sameJSON(want, have) {
		t.Fatalf("body %q: %s changed value: sent %q, stored %q", body, where, sent, got)
	}
}

func checkAck(t *testing.T, body []byte, where string, a persistence.AckItem, in *ackJSON, top string) {
	t.Helper()
	switch a.Status {
	case persistence.AckCompleted, persistence.AckFailed, persistence.AckDLQ, persistence.AckRetry:
	default:
		t.Fatalf("body %q: %s has status %q", body, where, a.Status)
	}
	checkName(t, body, where+".consumerGroup", a.Group)
	if top != "" && a.Group != top {
		t.Fatalf("body %q: %s group %q, want the top-level %q", body, where, a.Group, top)
	}
	if a.TransactionID == "" {
		t.Fatalf("body %q: %s has no transactionId", body, where)
	}
	checkText(t, body, where+".transactionId", a.TransactionID)
	checkText(t, body, where+".error", a.Error) // stored as the DLQ reason
	if !utf8.ValidString(a.LeaseID) {
		t.Fatalf("body %q: %s leaseId %q is not valid UTF-8", body, where, a.LeaseID)
	}
	if a.LeaseID != "" && a.HeldLeases != nil {
		t.Fatalf("body %q: %s names lease %q and also holds %q", body, where, a.LeaseID, a.HeldLeases)
	}
	for _, l := range a.HeldLeases {
		// Compared with the text of a uuid column, so only the canonical form can match.
		if id, e := uuid.Parse(l); e != nil || id.String() != l {
			t.Fatalf("body %q: %s holds lease %q, not a canonical UUID", body, where, l)
		}
	}
	var pid string
	if e := json.Unmarshal(in.PartitionID, &pid); e != nil {
		t.Fatalf("body %q: %s accepted partitionId %q: %v", body, where, in.PartitionID, e)
	}
	if want, e := uuid.Parse(pid); e != nil || want != a.PartitionID {
		t.Fatalf("body %q: %s partitionId %q gave %v", body, where, pid, a.PartitionID)
	}
}

// jsonbProblem returns why PostgreSQL 15's jsonb input would refuse the valid JSON text b, or "".
func jsonbProblem(b []byte) string {
	if !utf8.Valid(b) {
		return "invalid UTF-8 (SQLSTATE 22021)"
	}
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			for i++; b[i] != '"'; i++ {
				if b[i] != '\\' {
					continue
				}
				i++
				if b[i] != 'u' {
					continue
				}
				r := hex4(b[i+1 : i+5])
				i += 4
				switch {
				case r == 0:
					return `escape \u0000`
				case r >= 0xD800 && r < 0xDC00:
					if i+6 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' {
						if r2 := hex4(b[i+3 : i+7]); r2 >= 0xDC00 && r2 < 0xE000 {
							i += 6
							continue
						}
					}
					return "unpaired high surrogate escape"
				case r >= 0xDC00 && r < 0xE000:
					return "unpaired low surrogate escape"
				}
			}
		case c == '-' || (c >= '0' && c <= '9'):
			j := i
			for j < len(b) && strings.IndexByte("+-.eE0123456789", b[j]) >= 0 {
				j++
			}
			if lit := string(b[i:j]); !pgNumericOK(lit) {
				return "number " + lit + " overflows numeric (SQLSTATE 22003)"
			}
			i = j - 1
		}
	}
	return ""
}

func hex4(h []byte) rune {
	n, _ := strconv.ParseUint(string(h), 16, 32)
	return rune(n)
}

// pgNumericOK reports whether PostgreSQL numeric accepts the JSON number lit: at most 131072
// digits before the decimal point and a display scale of at most 16383 (measured on 15.18:
// 1e131071 and 1e-16383 pass, 1e131072, 1e-16384, 0e-16384 and 100e-16385 overflow, 0e200000 passes).
func pgNumericOK(lit string) bool {
	s := strings.TrimPrefix(lit, "-")
	mant, exp := s, int64(0)
	if k := strings.IndexAny(s, "eE"); k >= 0 {
		mant = s[:k]
		var err error
		if exp, err = strconv.ParseInt(s[k+1:], 10, 64); err != nil { // out of int64 range
			exp = 1 << 40
			if s[k+1] == '-' {
				exp = -exp
			}
		}
	}
	intPart, frac := mant, ""
	if k := strings.IndexByte(mant, '.'); k >= 0 {
		intPart, frac = mant[:k], mant[k+1:]
	}
	if int64(len(frac))-exp > 16383 {
		return false
	}
	digits := intPart + frac
	zeros := len(digits) - len(strings.TrimLeft(digits, "0"))
	if zeros == len(digits) {
		return true // zero
	}
	return int64(len(intPart)-zeros)+exp <= 131072
}

// decodeNumbers decodes b keeping numbers as their literals.
func decodeNumbers(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

// sameJSON compares decoded JSON values, numbers by exact value.
func sameJSON(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, v := range a {
			w, ok := b[k]
			if !ok || !sameJSON(v, w) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !sameJSON(a[i], b[i]) {
				return false
			}
		}
		return true
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		if a == b {
			return true
		}
		x, _, err1 := big.ParseFloat(string(a), 10, 4096, big.ToNearestEven)
		y, _, err2 := big.ParseFloat(string(b), 10, 4096, big.ToNearestEven)
		return err1 == nil && err2 == nil && x.Cmp(y) == 0
	default: // string, bool, nil
		return a == b
	}
}

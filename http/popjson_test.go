package http

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"queen/persistence"
)

// The hand-written pop encoder must say exactly what encoding/json says of the same answer.
func TestAppendPopBodyMatchesEncodingJSON(t *testing.T) {
	pid, mid := uuid.New(), uuid.New()
	trace := uuid.New()
	req := persistence.PopRequest{Queue: persistence.QueueName{Name: "q\"uo\\te"}, Group: "g\u0001 ☃ \xff"}
	other := persistence.Partition{ID: uuid.New(), Name: "p2"}
	res := persistence.PopResult{
		Partitions: []persistence.Partition{{ID: pid, Name: "p\n1"}, other},
		Messages: []persistence.Message{
			{ID: mid, TransactionID: "tx\t1", Payload: json.RawMessage(`{"a": [1, 2.5e10, "x"], "b": null}`),
				CreatedAt: time.Date(2026, 11, 29, 18, 33, 7, 316927000, time.UTC),
				TraceID:   uuid.NullUUID{UUID: trace, Valid: true}, ProducerSub: "user-7",
				Partition: persistence.Partition{ID: pid, Name: "p\n1"}},
			{ID: uuid.New(), TransactionID: "tx2", Payload: json.RawMessage(`"s"`), CreatedAt: time.Now(),
				Partition: persistence.Partition{ID: pid, Name: "p\n1"}},
			// A message of another partition with the first one's time, then the first
			// partition again: the encoder formats a time and a partition once while they
			// repeat, and must notice each change.
			{ID: uuid.New(), TransactionID: "tx3", Payload: json.RawMessage(`3`),
				CreatedAt: time.Date(2026, 11, 29, 18, 33, 7, 316927000, time.UTC), Partition: other},
			{ID: uuid.New(), TransactionID: "tx4", Payload: json.RawMessage(`4`),
				CreatedAt: time.Date(2026, 11, 29, 18, 33, 7, 316928000, time.UTC),
				Partition: persistence.Partition{ID: pid, Name: "p\n1"}},
		},
	}
	leaseID := uuid.NewString()
	got := appendPopBody(nil, req, res, leaseID)

	msgs := make([]popMessageJSON, len(res.Messages))
	for i, m := range res.Messages {
		msgs[i] = popMessageJSON{ConsumerGroup: req.Group, CreatedAt: m.CreatedAt.UTC().Format(timeFormat), Data: m.Payload,
			ID: m.ID.String(), LeaseID: leaseID, Partition: m.Partition.Name, PartitionID: m.Partition.ID.String(),
			ProducerSub: orNull(m.ProducerSub), TraceID: uuidText(m.TraceID), TransactionID: m.TransactionID}
	}
	id, n := pid.String(), 2
	want, err := json.Marshal(popJSON{ConsumerGroup: req.Group, LeaseID: &leaseID, Messages: msgs, Partition: "p\n1",
		PartitionID: &id, PartitionsClaimed: &n, Queue: req.Queue.Name, Success: true})
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		t.Fatalf("invalid JSON %s: %v", got, err)
	}
	_ = json.Unmarshal(want, &b)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestAppendJSONStringEscapes(t *testing.T) {
	for _, s := range []string{"", "plain", `"q"`, `\`, "\x00\x1f\n\r\t", "ünïcödé ☃ 😀", "bad\xffutf8", "\u2028"} {
		var back string
		if err := json.Unmarshal(appendJSONString(nil, s), &back); err != nil {
			t.Fatalf("%q: invalid JSON %s", s, appendJSONString(nil, s))
		}
		want, _ := json.Marshal(s)
		var w string
		_ = json.Unmarshal(want, &w)
		if back != w {
			t.Fatalf("%q: round trip %q, want %q", s, back, w)
		}
	}
}

func TestAppendCompactJSONB(t *testing.T) {
	for in, want := range map[string]string{
		`{"a": 1, "b": [1, 2, {"c": "x, y: z"}]}`: `{"a":1,"b":[1,2,{"c":"x, y: z"}]}`,
		`"a \", b"`:         `"a \", b"`,
		`[]`:                `[]`,
		`"\\", 1`:           `"\\",1`,
		`null`:              `null`,
		`[1, 2]`:            `[1,2]`,
		`{"a":"b: c"}`:      `{"a":"b: c"}`,
		`{"a":"x y","b":2}`: `{"a":"x y","b":2}`,
	} {
		if got := string(appendCompactJSONB(nil, []byte(in))); got != want {
			t.Errorf("%s: got %s want %s", in, got, want)
		}
	}
}

package persistence

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
)

func TestSpoolRecordRoundTrip(t *testing.T) {
	it := PushItem{
		Queue: QueueName{Name: "orders"}, Partition: "p1", TransactionID: "tx-1",
		TraceID:     uuid.NullUUID{UUID: uuid.MustParse("11111111-2222-3333-4444-555555555555"), Valid: true},
		Payload:     json.RawMessage(`{"n":[1,2,{"x":null}]}`),
		ProducerSub: "user-7",
		Encrypted:   true,
	}
	b, err := EncodeSpoolRecord(it)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeSpoolRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Queue != it.Queue || got.Partition != it.Partition || got.TransactionID != it.TransactionID ||
		got.TraceID != it.TraceID || got.ProducerSub != it.ProducerSub || got.Encrypted != it.Encrypted ||
		!bytes.Equal(got.Payload, it.Payload) {
		t.Fatalf("round trip: got %+v want %+v", got, it)
	}
}

// FuzzDecodeSpoolRecord: a record read from disk never panics the decoder, and what it accepts
// is a complete item that encodes back to a record decoding to the same item.
func FuzzDecodeSpoolRecord(f *testing.F) {
	f.Add([]byte(`{"queue":"q","partition":"Default","transactionId":"t","payload":{"a":1}}`))
	f.Add([]byte(`{"queue":"q","partition":"p","transactionId":"t","traceId":"11111111-2222-3333-4444-555555555555","producerSub":"s","encrypted":true,"payload":"x"}`))
	f.Add([]byte(`{"queue":"q","partition":"p","transactionId":"t","traceId":"nope","payload":1}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte{0xff, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		it, err := DecodeSpoolRecord(b)
		if err != nil {
			return
		}
		if it.Queue.Stored() == "" || it.Partition == "" || it.TransactionID == "" || !json.Valid(it.Payload) {
			t.Fatalf("accepted an incomplete record %q: %+v", b, it)
		}
		again, err := EncodeSpoolRecord(it)
		if err != nil {
			t.Fatalf("cannot re-encode %+v: %v", it, err)
		}
		back, err := DecodeSpoolRecord(again)
		if err != nil || back.Queue != it.Queue || back.TransactionID != it.TransactionID || back.TraceID != it.TraceID {
			t.Fatalf("re-encoded record differs: %+v vs %+v (%v)", back, it, err)
		}
	})
}

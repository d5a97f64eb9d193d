package http

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
)

// The push answer written by hand is the JSON encoding/json writes: the same keys in the same
// order with the same values (strings may be escaped differently, e.g. '<').
func FuzzPushResultsMatchJSON(f *testing.F) {
	f.Add("boom", 3, "m", "p", `"x"`, "q", "queued", "tx", "tx2", true)
	f.Add("", 0, "", "", "", "", "", "", "<&\u2028\"\\\x01", false)
	f.Fuzz(func(t *testing.T, errText string, index int, msgID, partition, rawPid, queue, status, txCamel, tx string, trace bool) {
		r := pushResultJSON{Error: errText, Index: index, MessageID: msgID, Partition: partition, Queue: queue, QueueName: queue,
			Status: status, TransactionIDCamel: txCamel, TransactionID: tx}
		if rawPid != "" {
			r.PartitionID = jsonString(&rawPid)
		}
		if trace {
			r.TraceID = jsonString(nil)
		}
		out := []pushResultJSON{r, {Index: index + 1}}
		want, err := json.Marshal(out)
		if err != nil {
			t.Skip()
		}
		requireSameJSON(t, appendPushResults(nil, out), want)
	})
}

// The ack batch answer written by hand is the JSON encoding/json writes.
func FuzzAckResultsMatchJSON(f *testing.F) {
	f.Add(true, "boom", 3, false, "p", "q", true, "tx", true)
	f.Add(false, "", 0, true, "", "", false, "<&\u2028\"\\\x01", false)
	f.Fuzz(func(t *testing.T, dlq bool, errText string, index int, released bool, partition, queue string, success bool, tx string, nulls bool) {
		r := ackResultJSON{DLQ: dlq, Index: index, LeaseReleased: released, Success: success, TransactionID: tx}
		if !nulls {
			r.Error, r.PartitionName, r.QueueName = &errText, &partition, &queue
		}
		out := []ackResultJSON{r, {Index: index + 1}}
		want, err := json.Marshal(out)
		if err != nil {
			t.Skip()
		}
		requireSameJSON(t, appendAckResults(nil, out), want)
	})
}

// requireSameJSON fails unless got, an array of flat objects, holds the keys of want in the
// same order with the same values.
func requireSameJSON(t *testing.T, got, want []byte) {
	t.Helper()
	var a, b []map[string]any
	if err := json.Unmarshal(got, &a); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if err := json.Unmarshal(want, &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) || !slices.Equal(jsonKeys(got), jsonKeys(want)) {
		t.Fatalf("by hand %s\nencoding/json %s", got, want)
	}
}

// jsonKeys lists the keys of each object of a JSON array of flat objects, in order.
func jsonKeys(doc []byte) []string {
	var objects []json.RawMessage
	if json.Unmarshal(doc, &objects) != nil {
		return nil
	}
	var keys []string
	for _, obj := range objects {
		dec := json.NewDecoder(bytes.NewReader(obj))
		dec.Token() // {
		for dec.More() {
			k, _ := dec.Token()
			keys = append(keys, fmt.Sprint(k))
			dec.Token() // a scalar value
		}
		keys = append(keys, "}")
	}
	return keys
}

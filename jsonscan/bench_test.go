package jsonscan

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// An ack-batch body of 100 items, as the clients send it, read field by field.
func BenchmarkFieldsAckBatch(b *testing.B) {
	var items []string
	for i := range 100 {
		items = append(items, fmt.Sprintf(`{"transactionId":"0000000a-b0b0-7000-8000-%012x","partitionId":"0190e4b2-7d0c-7b5e-9c1e-3f2a1b4c5d6e","leaseId":"0190e4b2-7d0c-7b5e-9c1e-3f2a1b4c5d6f","status":"completed"}`, i))
	}
	doc := []byte(`{"acknowledgments":[` + strings.Join(items, ",") + `],"consumerGroup":"__QUEUE_MODE__"}`)
	names := []string{"transactionId", "partitionId", "status", "consumerGroup", "leaseId", "error"}
	out := make([]json.RawMessage, len(names))
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		_, ok := Object(doc, 0, 0, []string{"acknowledgments", "consumerGroup"}, func(k, at int) (int, bool) {
			if k == 1 {
				return Value(doc, at, 1)
			}
			return Array(doc, at, 1, func(_, at int) (int, bool) { return Fields(doc, at, 2, names, out) })
		})
		if !ok {
			b.Fatal("not read")
		}
	}
}

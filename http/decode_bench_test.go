package http

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkDecodeAckBatch decodes the body a consumer sends after a pop of 100.
func BenchmarkDecodeAckBatch(b *testing.B) {
	var acks []string
	for i := range 100 {
		acks = append(acks, fmt.Sprintf(`{"transactionId":"tx-%06d","partitionId":"0191b5a4-6f1e-7c2a-9d3b-4e5f6a7b8c9d","status":"completed","leaseId":"0191b5a4-6f1e-7c2a-9d3b-4e5f6a7b8c%02d"}`, i, i))
	}
	body := []byte(`{"consumerGroup":"__QUEUE_MODE__","acknowledgments":[` + strings.Join(acks, ",") + `]}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := decodeAckBatch(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckPushBody walks the body of a push of 100 × 256 B through the validation boundary.
func BenchmarkCheckPushBody(b *testing.B) {
	var items []string
	payload := `{"data":"` + strings.Repeat("x", 240) + `"}`
	for i := range 100 {
		items = append(items, fmt.Sprintf(`{"queue":"orders","partition":"p-%d","transactionId":"tx-%06d","payload":%s}`, i%10, i, payload))
	}
	body := []byte(`{"items":[` + strings.Join(items, ",") + `]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := checkBody(body, 10000); err != nil {
			b.Fatal(err)
		}
	}
}

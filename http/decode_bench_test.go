package http

import (
	"fmt"
	"strings"
	"testing"

	"queen/persistence"
)

// ackBatchBody is the body a consumer sends after a pop of 100.
func ackBatchBody() []byte {
	var acks []string
	for i := range 100 {
		acks = append(acks, fmt.Sprintf(`{"transactionId":"tx-%06d","partitionId":"0191b5a4-6f1e-7c2a-9d3b-4e5f6a7b8c9d","status":"completed","leaseId":"0191b5a4-6f1e-7c2a-9d3b-4e5f6a7b8c%02d"}`, i, i))
	}
	return []byte(`{"consumerGroup":"__QUEUE_MODE__","acknowledgments":[` + strings.Join(acks, ",") + `]}`)
}

// pushBody is a push of 100 × 256 B over 10 partitions.
func pushBody() []byte {
	var items []string
	payload := `{"data":"` + strings.Repeat("x", 240) + `"}`
	for i := range 100 {
		items = append(items, fmt.Sprintf(`{"queue":"orders","partition":"p-%d","transactionId":"tx-%06d","payload":%s}`, i%10, i, payload))
	}
	return []byte(`{"items":[` + strings.Join(items, ",") + `]}`)
}

// BenchmarkDecodeAckBatch decodes an ack batch of 100 the way the route does (fast) and with
// encoding/json alone.
func BenchmarkDecodeAckBatch(b *testing.B) {
	decodeBench(b, ackBatchBody(), map[string]func([]byte) ([]persistence.AckItem, error){
		"fast": decodeAckBatch, "encoding-json": decodeAckBatchJSON})
}

// BenchmarkDecodePush decodes a push of 100 × 256 B the way the route does (fast) and with
// encoding/json alone.
func BenchmarkDecodePush(b *testing.B) {
	decodeBench(b, pushBody(), map[string]func([]byte) ([]pushItem, error){
		"fast": decodePush, "encoding-json": decodePushJSON})
}

func decodeBench[T any](b *testing.B, body []byte, decoders map[string]func([]byte) ([]T, error)) {
	for name, decode := range decoders {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decode(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCheckPushBody walks the body of a push of 100 × 256 B through the validation boundary.
func BenchmarkCheckPushBody(b *testing.B) {
	body := pushBody()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := checkBody(body, 10000); err != nil {
			b.Fatal(err)
		}
	}
}

package main

import (
	"encoding/json"
	"reflect"
	"testing"
)

// A pop answer as the broker writes it: every field of a message, data as the bench's payload.
const brokerPopAnswer = `{"consumerGroup":null,"leaseId":"6f1c2a52-3d63-4d39-9a43-b6a8e0a6f0d1","messages":[` +
	`{"consumerGroup":null,"createdAt":"2026-12-07T18:00:00.123Z","data":{"p":3,"s":17,"k":4,"r":"abcXYZ"},` +
	`"id":"0193a1b2-0000-7000-8000-000000000001","leaseId":"6f1c2a52-3d63-4d39-9a43-b6a8e0a6f0d1",` +
	`"partition":"p0004","partitionId":"0193a1b2-0000-7000-8000-0000000000aa","producerSub":null,` +
	`"queue":"bench","retryCount":0,"traceId":null,"transactionId":"00000003-b0b0-7000-8000-000000000011"}],` +
	`"partitionId":"0193a1b2-0000-7000-8000-0000000000aa","success":true}`

// scanPop and scanAcks read exactly what encoding/json reads into the same types, or give up.
func FuzzScanMatchesJSON(f *testing.F) {
	for _, s := range []string{brokerPopAnswer, `{"success":false,"error":"no_available_partition","messages":[]}`,
		`{"success":false,"error":"lease_held"}`, `{"success":true,"messages":null}`, `{"success":true}`, ``, `[]`,
		`{"success":true,"messages":[{"data":null,"transactionId":"t\u00e9"}]}`,
		`{"success":true,"messages":[{"data":{"p":1.5}}]}`, `{"success":true,"messages":[{"data":{"s":1e3}}]}`,
		`{"success":true,"messages":[{"TransactionId":"x","transactionId":"y"}]}`,
		`{"success":true,"messages":[{"partition":"\xff"}]}`, `{"Success":true,"messages":[{}]}`,
		`[{"success":true,"error":null},{"success":false,"error":"Message not found"}]`,
		`[{"success":true,"error":"\u0041"}]`, `[{"success":1}]`, `[null]`, `{"success":true}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, ok := scanPop(b); ok {
			want, err := decodePop[popMsg](b)
			if err != nil {
				t.Fatalf("%q: scanPop read %+v, encoding/json failed: %v", b, got, err)
			}
			if len(got) != 0 || len(want) != 0 {
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%q: scanPop read %+v, encoding/json %+v", b, got, want)
				}
			}
		}
		if got, ok := scanAcks(b); ok {
			var want []ackResult
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatalf("%q: scanAcks read %+v, encoding/json failed: %v", b, got, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%q: scanAcks read %+v, encoding/json %+v", b, got, want)
			}
		}
	})
}

// The broker's answer takes the one-pass path, and reads as encoding/json reads it.
func TestScanPopTakesTheBrokersAnswer(t *testing.T) {
	got, ok := scanPop([]byte(brokerPopAnswer))
	if !ok {
		t.Fatal("scanPop gave up on the broker's answer")
	}
	want, err := decodePop[popMsg]([]byte(brokerPopAnswer))
	if err != nil || !reflect.DeepEqual(got, want) || len(got) != 1 || got[0].Data.S != 17 {
		t.Fatalf("scanPop read %+v, encoding/json %+v (%v)", got, want, err)
	}
}

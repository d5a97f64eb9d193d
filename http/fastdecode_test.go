package http

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/google/uuid"
)

// Bodies the fast readers must leave to encoding/json, and bodies they must take.
var (
	fastRefused = []string{
		`{"Items":[{"queue":"q"}]}`,                       // a key matching only case-insensitively
		`{"items":[{"QUEUE":"q"}]}`,                       //
		`{"items":[{"queue":"a","queue":"b"}]}`,           // a field twice
		`{"items":[],"items":[{"queue":"q"}]}`,            //
		`{"items":[{"qu\u0065ue":"q"}]}`,                  // an escaped key
		`{"items":[{"queue":"q","ſ":1}]}`,                 // a key outside ASCII
		`{"items":null}`, `{"items":{}}`, `{"items":[1]}`, // not an array of objects
		`{"items":[{"queue":"q"}]`, `[]`, `{}`, // invalid JSON, not an object, no items
	}
	fastTaken = []string{
		`{"items":[]}`,
		` { "items" : [ { "queue" : "q" , "payload" : { "a" : [ 1 , "x\"}]" ] } } ] , "other" : [ { } ] } `,
		`{"items":[{"queue":"q","payload":"\\"},{"queue":"r","payload":null,"data":{"d":1},"extra":{"queue":1}}]}`,
		`{"items":[{"queue":"q","partition":""}]}`, // taken, and refused by the item's validation
	}
)

func TestFastPushTakesTheCommonShapeOnly(t *testing.T) {
	for _, body := range append(append([]string{}, capturedPush...), fastTaken...) {
		if _, handled, _ := fastPush([]byte(body)); !handled {
			t.Errorf("fastPush left %s to encoding/json", body)
		}
	}
	for _, body := range fastRefused {
		if _, handled, _ := fastPush([]byte(body)); handled {
			t.Errorf("fastPush took %s", body)
		}
	}
}

// Whatever body the fast reader takes, it answers exactly as the encoding/json path does: the
// same error, or the same items with the same fields and payload bytes (a transactionId the
// broker generated differs by nature).
func FuzzFastPushMatchesJSON(f *testing.F) {
	addSeeds(f, capturedPush, garbageBodies, fastRefused, fastTaken)
	f.Fuzz(func(t *testing.T, body []byte) {
		fast, handled, ferr := fastPush(body)
		if !handled {
			return
		}
		slow, serr := decodePushJSON(body)
		if fmt.Sprint(ferr) != fmt.Sprint(serr) {
			t.Fatalf("%q: fast error %v, encoding/json %v", body, ferr, serr)
		}
		if len(fast) != len(slow) {
			t.Fatalf("%q: fast %d items, encoding/json %d", body, len(fast), len(slow))
		}
		for i := range fast {
			a, b := fast[i], slow[i]
			if _, err := uuid.Parse(a.TransactionID); err == nil && a.TransactionID != b.TransactionID {
				if _, err := uuid.Parse(b.TransactionID); err == nil {
					a.TransactionID = b.TransactionID // both generated
				}
			}
			if !bytes.Equal(a.Payload, b.Payload) {
				t.Fatalf("%q: item %d payload %s, encoding/json %s", body, i, a.Payload, b.Payload)
			}
			a.Payload, b.Payload = nil, nil
			if fmt.Sprintf("%+v", a) != fmt.Sprintf("%+v", b) {
				t.Fatalf("%q: item %d\nfast %+v\njson %+v", body, i, a, b)
			}
		}
	})
}

var fastAckTaken = []string{
	`{"acknowledgments":[]}`,
	`{"consumerGroup":"g","acknowledgments":[{"transactionId":"t","partitionId":"` + uuidA + `","status":"success","x":[{}]}]}`,
	`{"consumerGroup":7,"acknowledgments":[{"transactionId":"t"}]}`, // taken, and refused
}

func TestFastAckBatchTakesTheCommonShapeOnly(t *testing.T) {
	for _, body := range append(append([]string{}, capturedAckBatch...), fastAckTaken...) {
		if _, handled, _ := fastAckBatch([]byte(body)); !handled {
			t.Errorf("fastAckBatch left %s to encoding/json", body)
		}
	}
	for _, body := range []string{`{"acknowledgments":null}`, `{"acknowledgments":[1]}`, `{"Acknowledgments":[]}`,
		`{"acknowledgments":[{"status":"a","status":"b"}]}`, `{"consumerGroup":"g"}`} {
		if _, handled, _ := fastAckBatch([]byte(body)); handled {
			t.Errorf("fastAckBatch took %s", body)
		}
	}
}

// Whatever body the fast reader takes, it answers exactly as the encoding/json path does.
func FuzzFastAckBatchMatchesJSON(f *testing.F) {
	addSeeds(f, capturedAckBatch, garbageBodies, fastAckTaken)
	f.Fuzz(func(t *testing.T, body []byte) {
		fast, handled, ferr := fastAckBatch(body)
		if !handled {
			return
		}
		slow, serr := decodeAckBatchJSON(body)
		if fmt.Sprint(ferr) != fmt.Sprint(serr) || fmt.Sprintf("%+v", fast) != fmt.Sprintf("%+v", slow) {
			t.Fatalf("%q:\nfast %+v %v\njson %+v %v", body, fast, ferr, slow, serr)
		}
	})
}

package jsonscan

import (
	"bytes"
	"encoding/json"
	"testing"
)

// What Fields reads from a document, encoding/json reads the same: the document is valid and
// each named field's value is the json.RawMessage encoding/json fills in.
func FuzzFieldsMatchJSON(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":"x","items":[{"n":1},{"n":2}]}`, ` {"items":[] , "other":{"deep":[1,2,{"c":null}]}} `,
		`{"a":1,"a":2}`, `{"A":1}`, `{"a\u0062":1}`, `{"a":1,}`, `{"a":[1,]}`, `{"a":1} x`, `{"a":"\x01"}`,
		`{"items":[{"n":1}{"n":2}]}`, `{}`, `[]`, `{"b":tru}`,
	} {
		f.Add([]byte(s))
	}
	names := []string{"a", "b", "items"}
	f.Fuzz(func(t *testing.T, doc []byte) {
		out := make([]json.RawMessage, len(names))
		end, ok := Fields(doc, 0, 0, names, out)
		if !ok || !End(doc, end) {
			return
		}
		var want struct {
			A     json.RawMessage `json:"a"`
			B     json.RawMessage `json:"b"`
			Items json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(doc, &want); err != nil {
			t.Fatalf("%q: Fields read it, json.Unmarshal: %v", doc, err)
		}
		for k, w := range []json.RawMessage{want.A, want.B, want.Items} {
			if !bytes.Equal(out[k], w) {
				t.Fatalf("%q: field %s is %q, encoding/json reads %q", doc, names[k], out[k], w)
			}
		}
	})
}

// Array reads every element of a valid array, in order, and refuses an invalid one.
func FuzzArrayMatchesJSON(f *testing.F) {
	for _, s := range []string{`[1,"a",{"b":[2]},null]`, `[]`, ` [ 1 , 2 ] `, `[1,]`, `[1 2]`, `[`, `[1]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var got []json.RawMessage
		end, ok := Array(doc, 0, 0, func(_, at int) (int, bool) {
			end, ok := Value(doc, at, 1)
			got = append(got, doc[at:end])
			return end, ok
		})
		ok = ok && End(doc, end)
		var want []json.RawMessage
		err := json.Unmarshal(doc, &want)
		isArray := err == nil && want != nil
		if ok != isArray {
			t.Fatalf("%q: Array %v, encoding/json reads an array: %v (%v)", doc, ok, isArray, err)
		}
		if !ok {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d elements, encoding/json reads %d", doc, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%q: element %d is %q, encoding/json reads %q", doc, i, got[i], want[i])
			}
		}
	})
}

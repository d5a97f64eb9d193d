package http

import (
	"encoding/json"
	"strings"
	"testing"
)

// validJSON accepts exactly what json.Valid accepts.
func FuzzValidJSONMatchesEncodingJSON(f *testing.F) {
	addSeeds(f, capturedPush, capturedAckBatch, capturedTransaction, garbageBodies, fastRefused, fastTaken)
	for _, s := range []string{`"\u12"`, `"\x"`, "\"\x1f\"", `01`, `-`, `1.`, `1e`, `1e+`, `-0.5E-3`, `[1,]`, `{"a":1,}`,
		`{"a" 1}`, `tru`, `nulll`, "\"\xff\"", `[` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `]`,
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000), ` {} `, "{}\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if got, want := validJSON(body), json.Valid(body); got != want {
			t.Fatalf("%q: validJSON %v, json.Valid %v", body, got, want)
		}
	})
}

// Strings are read eight bytes at a time: a quote, a backslash or a control byte at any place
// of a word, or a string that ends inside one, reads as json.Valid reads it.
func TestValidJSONStringAtEveryOffset(t *testing.T) {
	for _, special := range []string{`"`, `\`, `\"`, `\n`, `\u00e9`, "\x00", "\x1f", "\x7f", "\xc3\xa9", " "} {
		for at := range 20 {
			for tail := range 10 {
				s := `"` + strings.Repeat("a", at) + special + strings.Repeat("b", tail) + `"`
				for _, body := range []string{s, "[" + s + "]", s[:len(s)-1]} {
					if got, want := validJSON([]byte(body)), json.Valid([]byte(body)); got != want {
						t.Fatalf("%q: validJSON %v, json.Valid %v", body, got, want)
					}
				}
			}
		}
	}
}

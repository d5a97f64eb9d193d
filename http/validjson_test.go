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

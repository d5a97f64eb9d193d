package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"
)

// valid reads b as one document: its value, then nothing but spaces.
func valid(b []byte) bool {
	end, ok := Value(b, SkipSpace(b, 0), 0)
	return ok && End(b, end)
}

// A document's value is accepted exactly when json.Valid accepts the document.
func FuzzValidJSONMatchesEncodingJSON(f *testing.F) {
	// Bodies as the official clients send them, and a pop answer as the broker writes it.
	for _, s := range []string{
		`{"items":[{"queue":"orders","partition":"p1","payload":{"n":1},"transactionId":"tx-1"},{"queue":"orders","partition":"p2","payload":{"n":3}}]}`,
		`{"acknowledgments":[{"transactionId":"tx-1","partitionId":"cbb8dc0e-77f4-4d18-8ff7-a4d3ea4ea202","leaseId":"01a22895-3e93-7000-83a7-68ece059fce8","status":"completed"}]}`,
		`{"leaseId":"6f1c2a52-3d63-4d39-9a43-b6a8e0a6f0d1","messages":[{"createdAt":"2026-12-07T18:00:00.123Z","data":{"p":3,"r":"a\u00e9b"},"traceId":null}],"success":true}`,
	} {
		f.Add([]byte(s))
	}
	for _, s := range []string{`"\u12"`, `"\x"`, "\"\x1f\"", `01`, `-`, `1.`, `1e`, `1e+`, `-0.5E-3`, `[1,]`, `{"a":1,}`,
		`{"a" 1}`, `tru`, `nulll`, "\"\xff\"", `[` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `]`,
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000), ` {} `, "{}\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if got, want := valid(body), json.Valid(body); got != want {
			t.Fatalf("%q: valid %v, json.Valid %v", body, got, want)
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
					if got, want := valid([]byte(body)), json.Valid([]byte(body)); got != want {
						t.Fatalf("%q: valid %v, json.Valid %v", body, got, want)
					}
				}
			}
		}
	}
}

// PlainRun stops at the first byte a string reader must look at, wherever it falls in the
// eight-byte words it reads.
func FuzzPlainRunStopsAtTheFirstSpecialByte(f *testing.F) {
	f.Add([]byte(`abcdefghijklmnopqrstuvwxyz"`), 0)
	f.Add([]byte("0123456789\\n\x01é"), 3)
	f.Fuzz(func(t *testing.T, b []byte, i int) {
		if i < 0 || i > len(b) {
			t.Skip()
		}
		want := i
		for want < len(b) && b[want] != '"' && b[want] != '\\' && b[want] >= 0x20 && b[want] < 0x80 {
			want++
		}
		if got := PlainRun(b, i); got != want {
			t.Fatalf("PlainRun(%q, %d) = %d, want %d", b, i, got, want)
		}
		if got := PlainRun(string(b), i); got != want {
			t.Fatalf("PlainRun of the string %q, %d = %d, want %d", b, i, got, want)
		}
	})
}

package http

import (
	"strings"
	"testing"
)

// A body that ends inside a string of a payload (whose strings the walk steps over unread), or
// inside the escape that ends it, is left to the decoder's syntax error: the walk stops there
// without reading past the body.
func TestCheckBodyStopsAtATruncatedPayloadString(t *testing.T) {
	for _, body := range []string{
		`{"items":[{"queue":"q","payload":"abc`,
		`{"items":[{"queue":"q","payload":"abc\`,
		`{"items":[{"queue":"q","payload":{"k":"v`,
		"{\"items\":\x00\x00\x00\x7fueue\":\"q\",\"payload\":Y\"\x00\x02:1}}]}",
	} {
		if err := checkBody([]byte(body), 1000); err != nil {
			t.Errorf("checkBody(%q) = %v, want nil (a syntax error is the decoder's to report)", body, err)
		}
	}
}

// The walk steps over a payload's strings whatever their escapes, and picks the body up again
// right after them: a field that follows is still checked. A quote after an odd run of
// backslashes is inside the string; after an even run (escaped backslashes), it ends it.
func TestCheckBodyResumesAfterAPayloadString(t *testing.T) {
	for _, payload := range []string{
		`"plain"`, `""`, `"a \" quote"`, `"ends with a backslash \\"`, `"three \\\" then more"`,
		`"\\\\"`, `{"k":"v \" }, ] still inside","n":[1,"\\"]}`, `["\"", "\\", "}"]`,
	} {
		body := `{"items":[{"payload":` + payload + `,"queue":"q\u0000"}]}`
		if err := checkBody([]byte(body), 1000); err == nil || !strings.Contains(err.Error(), `items[0].queue must not contain the character \u0000`) {
			t.Errorf("payload %s: checkBody = %v, want the queue after it refused", payload, err)
		}
	}
}

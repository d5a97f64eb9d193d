package http

import "testing"

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

package proxy

import "testing"

// A push's partition key is its first item's queue and partition, read past anything before
// them; a body that does not start as a push has none.
func TestPushPartition(t *testing.T) {
	for body, want := range map[string]string{
		`{"items":[{"queue":"q","partition":"p","payload":{"big":[1,2,3]}}]}`:                    "q\x00p",
		`{"items":[{"payload":{"queue":"not this"},"partition":"p","queue":"q"},{"queue":"r"}]}`: "q\x00p",
		`{"other":{"items":[]},"items":[{"queue":"q\u00e9"}]}`:                                   "q\u00e9\x00Default",
		`{"items":[{"queue":"q","partition":""}]}`:                                               "q\x00Default",
		`{"items":[]}`:                  "",
		`{"items":[{"partition":"p"}]}`: "",
		`{"items":[{"queue":7}]}`:       "",
		`[{"queue":"q"}]`:               "",
		`{"items":[{"queue":"q"`:        "q\x00Default", // cut short: routed, then refused by the broker
		``:                              "",
	} {
		if got := pushPartition([]byte(body)); got != want {
			t.Errorf("pushPartition(%s) = %q, want %q", body, got, want)
		}
	}
}

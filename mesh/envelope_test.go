package mesh

import (
	"bytes"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"testing"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

func TestEnvelopeRoundTrip(t *testing.T) {
	body := []byte("{ \"queue\" : \"q\",\n \"partition\": \"p\" }")
	env, err := SealEnvelope(testKey, 7, TypeMessageAvailable, body)
	if err != nil {
		t.Fatal(err)
	}
	got, err := OpenEnvelope(testKey, 7, TypeMessageAvailable, env)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"queue":"q","partition":"p"}` {
		t.Fatalf("body = %s", got)
	}
}

func TestOpenEnvelopeRefuses(t *testing.T) {
	valid, _ := SealEnvelope(testKey, 3, TypeMaintenanceModeSet, []byte(`{"enabled":false}`))
	otherKey, _ := SealEnvelope([]byte("another key"), 3, TypeMaintenanceModeSet, []byte(`{"enabled":true}`))
	cases := []struct {
		name    string
		typ     byte
		want    uint64
		payload []byte
		err     error
	}{
		{"altered body", TypeMaintenanceModeSet, 3, bytes.Replace(valid, []byte("false"), []byte("true"), 1), ErrBadMAC},
		{"altered seq", TypeMaintenanceModeSet, 4, bytes.Replace(valid, []byte(`"seq":3`), []byte(`"seq":4`), 1), ErrBadMAC},
		{"other type", TypePopMaintenanceModeSet, 3, valid, ErrBadMAC},
		{"other key", TypeMaintenanceModeSet, 3, otherKey, ErrBadMAC},
		{"replayed", TypeMaintenanceModeSet, 4, valid, ErrSequence},
		{"ahead", TypeMaintenanceModeSet, 2, valid, ErrSequence},
		{"not an envelope", TypeMaintenanceModeSet, 3, []byte(`{"enabled":true}`), ErrMalformedEnvelope},
		{"not json", TypeMaintenanceModeSet, 3, []byte(`{`), ErrMalformedEnvelope},
		{"short mac", TypeMaintenanceModeSet, 3, []byte(`{"seq":3,"mac":"AAAA","body":{}}`), ErrMalformedEnvelope},
		{"no body", TypeMaintenanceModeSet, 3, []byte(`{"seq":3,"mac":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}`), ErrMalformedEnvelope},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body, err := OpenEnvelope(testKey, c.want, c.typ, c.payload)
			if !errors.Is(err, c.err) || body != nil {
				t.Fatalf("OpenEnvelope = %s, %v; want error %v", body, err, c.err)
			}
		})
	}
	if _, err := OpenEnvelope(nil, 3, TypeMaintenanceModeSet, valid); err == nil {
		t.Fatal("an empty key opened an envelope")
	}
	if _, err := SealEnvelope(nil, 1, TypeHeartbeat, []byte(`{}`)); err == nil {
		t.Fatal("an empty key sealed an envelope")
	}
}

func FuzzOpenEnvelope(f *testing.F) {
	for i, body := range []string{`{}`, `{"enabled":true}`, `{"items":[{"queue":"q","partition":"p"}]}`} {
		env, _ := SealEnvelope(testKey, uint64(i+1), TypeMaintenanceModeSet, []byte(body))
		f.Add(env, uint64(i+1), TypeMaintenanceModeSet)
	}
	f.Add([]byte(`{"seq":1,"mac":"","body":{}}`), uint64(1), TypeHeartbeat)
	f.Add([]byte(`{"seq":1,"seq":2,"body":1,"body":{},"mac":null}`), uint64(2), byte(99))
	f.Fuzz(func(t *testing.T, payload []byte, want uint64, typ byte) {
		body, err := OpenEnvelope(testKey, want, typ, payload)
		if err != nil {
			if body != nil {
				t.Fatal("body returned with an error")
			}
			if !errors.Is(err, ErrBadMAC) && !errors.Is(err, ErrSequence) && !errors.Is(err, ErrMalformedEnvelope) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		// Accepted: the MAC in the envelope must be the MAC of (want, typ, body) under the key.
		var env struct {
			MAC []byte `json:"mac"`
		}
		if err := json.Unmarshal(payload, &env); err != nil {
			t.Fatalf("accepted an envelope that does not decode: %v", err)
		}
		if !hmac.Equal(env.MAC, frameMAC(testKey, want, typ, body)) {
			t.Fatalf("accepted body %q whose MAC does not verify", body)
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON body %q", body)
		}
	})
}

package seal

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
)

const testKeyHex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

func testKey(t *testing.T) *Key {
	t.Helper()
	k, err := ParseKey(testKeyHex)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpenRoundTrip(t *testing.T) {
	k := testKey(t)
	for _, payload := range []string{`{"orderId":1,"note":"secret-marker"}`, `"a string"`, `42`, `null`, `[1,2,3]`, `{}`} {
		env, err := k.Seal([]byte(payload))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(env, []byte("secret-marker")) {
			t.Fatalf("envelope holds plaintext: %s", env)
		}
		var e map[string]string
		if err := json.Unmarshal(env, &e); err != nil || len(e) != 3 {
			t.Fatalf("envelope %s is not a 3-field object: %v", env, err)
		}
		iv, _ := base64.StdEncoding.DecodeString(e["iv"])
		tag, _ := base64.StdEncoding.DecodeString(e["authTag"])
		if len(iv) != 12 || len(tag) != 16 {
			t.Fatalf("iv %d bytes, tag %d bytes; want 12 and 16", len(iv), len(tag))
		}
		got, err := k.Open(env)
		if err != nil || string(got) != payload {
			t.Fatalf("Open(Seal(%s)) = %s, %v", payload, got, err)
		}
	}
}

func TestSealUsesFreshNonces(t *testing.T) {
	k := testKey(t)
	seen := map[string]bool{}
	for range 1000 {
		env, err := k.Seal([]byte(`{"same":true}`))
		if err != nil {
			t.Fatal(err)
		}
		var e map[string]string
		_ = json.Unmarshal(env, &e)
		if seen[e["iv"]] {
			t.Fatalf("nonce %s drawn twice", e["iv"])
		}
		seen[e["iv"]] = true
	}
}

func TestOpenRefusesTamperingAndWrongKey(t *testing.T) {
	k := testKey(t)
	env, _ := k.Seal([]byte(`{"a":1}`))
	var e map[string]string
	_ = json.Unmarshal(env, &e)
	ct, _ := base64.StdEncoding.DecodeString(e["encrypted"])
	ct[0] ^= 1
	e["encrypted"] = base64.StdEncoding.EncodeToString(ct)
	bad, _ := json.Marshal(e)
	if _, err := k.Open(bad); err == nil {
		t.Fatal("a flipped ciphertext bit opened")
	}
	other, _ := ParseKey(strings.Repeat("ab", 32))
	if _, err := other.Open(env); err == nil {
		t.Fatal("the wrong key opened the envelope")
	}
	for _, notEnv := range []string{`{"orderId":1}`, `"x"`, `{"encrypted":"AA==","iv":"AA=="}`, `not json`} {
		if _, err := k.Open([]byte(notEnv)); err == nil {
			t.Fatalf("Open(%s) succeeded", notEnv)
		}
	}
}

// The reference broker stores a 16-byte IV; GCM uses its first 12 bytes. A Node.js writer with
// a 16-byte IV uses all 16. Both must open.
func TestOpenReferenceEnvelopes(t *testing.T) {
	k := testKey(t)
	raw, _ := hex.DecodeString(testKeyHex)
	block, _ := aes.NewCipher(raw)
	iv := []byte("0123456789abcdef")
	plain := []byte(`{"from":"reference"}`)
	gcm12, _ := cipher.NewGCM(block)
	gcm16, _ := cipher.NewGCMWithNonceSize(block, 16)
	for name, sealed := range map[string][]byte{
		"first 12 of 16": gcm12.Seal(nil, iv[:12], plain, nil),
		"all 16":         gcm16.Seal(nil, iv, plain, nil),
	} {
		env, _ := json.Marshal(map[string]string{
			"encrypted": base64.StdEncoding.EncodeToString(sealed[:len(sealed)-16]),
			"iv":        base64.StdEncoding.EncodeToString(iv),
			"authTag":   base64.StdEncoding.EncodeToString(sealed[len(sealed)-16:]),
		})
		got, err := k.Open(env)
		if err != nil || !bytes.Equal(got, plain) {
			t.Errorf("%s: Open = %s, %v", name, got, err)
		}
	}
}

func TestParseKeyRefusesMalformedKeys(t *testing.T) {
	for _, bad := range []string{"", "abc", strings.Repeat("a", 63), strings.Repeat("a", 65), strings.Repeat("zz", 32)} {
		_, err := ParseKey(bad)
		if err == nil {
			t.Fatalf("ParseKey(%q) succeeded", bad)
		}
		if len(bad) > 8 && strings.Contains(err.Error(), bad) {
			t.Fatalf("the error repeats the key: %v", err)
		}
	}
	if _, err := ParseKey(strings.ToUpper(testKeyHex)); err != nil {
		t.Fatalf("upper-case hex refused: %v", err)
	}
}

func TestQueuesReloadDoesNotUndoALocalChange(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	db := []string{"a"}
	first := true
	q := NewQueues(func(context.Context) ([]string, error) {
		if first {
			first = false
			entered <- struct{}{}
			<-release
		}
		return db, nil
	}, nil)
	done := make(chan bool)
	go func() {
		fresh, _ := q.Reload(context.Background())
		done <- fresh
	}()
	<-entered
	q.Set("b", true) // configured here while the reload reads
	close(release)
	if <-done {
		t.Fatal("a reload that raced with Set was applied")
	}
	if !q.Encrypted("b") || q.Encrypted("a") {
		t.Fatalf("after a raced reload: a=%v b=%v, want the local state", q.Encrypted("a"), q.Encrypted("b"))
	}
	db = []string{"a", "b"}
	if fresh, err := q.Reload(context.Background()); !fresh || err != nil {
		t.Fatalf("Reload = %v, %v", fresh, err)
	}
	if !q.Encrypted("a") || !q.Encrypted("b") {
		t.Fatal("a clean reload was not applied")
	}
	q.Set("a", false)
	if q.Encrypted("a") {
		t.Fatal("Set false kept the queue")
	}
}

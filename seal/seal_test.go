package seal

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"testing"
)

const testKeyHex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

func testKey(t *testing.T) *Key {
	t.Helper()
	raw, _ := hex.DecodeString(testKeyHex)
	k, err := NewKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// storedEnvelope is an envelope's keys as Seal writes them.
type storedEnvelope struct {
	Encrypted string `json:"encrypted"`
	IV        string `json:"iv"`
	AuthTag   string `json:"authTag"`
	Ctx       int    `json:"ctx"`
}

func TestSealOpenRoundTrip(t *testing.T) {
	k := testKey(t)
	for _, payload := range []string{`{"orderId":1,"note":"secret-marker"}`, `"a string"`, `42`, `null`, `[1,2,3]`, `{}`} {
		env, err := k.Seal([]byte(payload), "orders", "tx-1")
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(env, []byte("secret-marker")) {
			t.Fatalf("envelope holds plaintext: %s", env)
		}
		var keys map[string]json.RawMessage
		var e storedEnvelope
		if err := json.Unmarshal(env, &keys); err != nil || len(keys) != 4 {
			t.Fatalf("envelope %s is not a 4-key object: %v", env, err)
		}
		if err := json.Unmarshal(env, &e); err != nil || e.Ctx != 1 {
			t.Fatalf("envelope %s lacks the marker \"ctx\":1: %v", env, err)
		}
		iv, _ := base64.StdEncoding.DecodeString(e.IV)
		tag, _ := base64.StdEncoding.DecodeString(e.AuthTag)
		if len(iv) != 12 || len(tag) != 16 {
			t.Fatalf("iv %d bytes, tag %d bytes; want 12 and 16", len(iv), len(tag))
		}
		got, err := k.Open(env, "orders", "tx-1")
		if err != nil || string(got) != payload {
			t.Fatalf("Open(Seal(%s)) = %s, %v", payload, got, err)
		}
	}
}

// A bound envelope opens only for the message it was sealed for: another queue (a tenant's queue
// of the same name included), another transactionId, or the same bytes split differently
// between the two fields all fail.
func TestOpenRefusesAnotherMessagesEnvelope(t *testing.T) {
	k := testKey(t)
	env, err := k.Seal([]byte(`{"a":1}`), "ab", "c")
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range [][2]string{{"ab", "d"}, {"other", "c"}, {"tenant\x1fab", "c"}, {"a", "bc"}, {"abc", ""}, {"", ""}} {
		if got, err := k.Open(env, other[0], other[1]); err == nil {
			t.Fatalf("the envelope of ab/c opened as %s/%s: %s", other[0], other[1], got)
		}
	}
	// The marker cannot be stripped to open the envelope without its context.
	var keys map[string]json.RawMessage
	_ = json.Unmarshal(env, &keys)
	delete(keys, "ctx")
	stripped, _ := json.Marshal(keys)
	if _, err := k.Open(stripped, "ab", "c"); err == nil {
		t.Fatal("a bound envelope opened without its marker")
	}
	keys["ctx"] = json.RawMessage(`2`)
	unknown, _ := json.Marshal(keys)
	if _, err := k.Open(unknown, "ab", "c"); err == nil {
		t.Fatal("an envelope with an unknown ctx opened")
	}
}

// Envelopes sealed before the binding existed (a 12-byte nonce, no associated data, no marker)
// open for any message, as they always did; adding the marker to one does not.
func TestOpenUnboundEnvelope(t *testing.T) {
	k := testKey(t)
	raw, _ := hex.DecodeString(testKeyHex)
	block, _ := aes.NewCipher(raw)
	gcm, _ := cipher.NewGCM(block)
	nonce := []byte("twelve-bytes")
	plain := []byte(`{"from":"before the binding"}`)
	sealed := gcm.Seal(nil, nonce, plain, nil)
	fields := map[string]any{
		"encrypted": base64.StdEncoding.EncodeToString(sealed[:len(sealed)-16]),
		"iv":        base64.StdEncoding.EncodeToString(nonce),
		"authTag":   base64.StdEncoding.EncodeToString(sealed[len(sealed)-16:]),
	}
	env, _ := json.Marshal(fields)
	got, err := k.Open(env, "orders", "tx-1")
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Open = %s, %v", got, err)
	}
	fields["ctx"] = 1
	marked, _ := json.Marshal(fields)
	if _, err := k.Open(marked, "orders", "tx-1"); err == nil {
		t.Fatal("an unbound envelope opened as a bound one")
	}
}

func TestSealUsesFreshNonces(t *testing.T) {
	k := testKey(t)
	seen := map[string]bool{}
	for range 1000 {
		env, err := k.Seal([]byte(`{"same":true}`), "q", "tx")
		if err != nil {
			t.Fatal(err)
		}
		var e storedEnvelope
		_ = json.Unmarshal(env, &e)
		if seen[e.IV] {
			t.Fatalf("nonce %s drawn twice", e.IV)
		}
		seen[e.IV] = true
	}
}

func TestOpenRefusesTamperingAndWrongKey(t *testing.T) {
	k := testKey(t)
	env, _ := k.Seal([]byte(`{"a":1}`), "q", "tx")
	var e storedEnvelope
	_ = json.Unmarshal(env, &e)
	ct, _ := base64.StdEncoding.DecodeString(e.Encrypted)
	ct[0] ^= 1
	e.Encrypted = base64.StdEncoding.EncodeToString(ct)
	bad, _ := json.Marshal(e)
	if _, err := k.Open(bad, "q", "tx"); err == nil {
		t.Fatal("a flipped ciphertext bit opened")
	}
	other, _ := NewKey(bytes.Repeat([]byte{0xab}, 32))
	if _, err := other.Open(env, "q", "tx"); err == nil {
		t.Fatal("the wrong key opened the envelope")
	}
	for _, notEnv := range []string{`{"orderId":1}`, `"x"`, `{"encrypted":"AA==","iv":"AA=="}`, `not json`} {
		if _, err := k.Open([]byte(notEnv), "q", "tx"); err == nil {
			t.Fatalf("Open(%s) succeeded", notEnv)
		}
	}
}

// FuzzBinding: an envelope sealed for one (queue, transactionId) opens for exactly that pair.
func FuzzBinding(f *testing.F) {
	f.Add("ab", "c", "a", "bc")
	f.Add("q", "tx", "q", "tx")
	f.Add("t\x1fq", "", "t", "\x1fq")
	f.Fuzz(func(t *testing.T, q1, tx1, q2, tx2 string) {
		k := testKey(t)
		env, err := k.Seal([]byte(`{"n":1}`), q1, tx1)
		if err != nil {
			t.Fatal(err)
		}
		_, err = k.Open(env, q2, tx2)
		if same := q1 == q2 && tx1 == tx2; same != (err == nil) {
			t.Fatalf("sealed for %q/%q, opened for %q/%q: err %v", q1, tx1, q2, tx2, err)
		}
	})
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
		got, err := k.Open(env, "orders", "tx-1")
		if err != nil || !bytes.Equal(got, plain) {
			t.Errorf("%s: Open = %s, %v", name, got, err)
		}
	}
}

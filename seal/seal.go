// Package seal is payload encryption at rest: AES-256-GCM under the key of QUEEN_ENCRYPTION_KEY,
// for the queues configured with encryptionEnabled.
//
// A sealed payload is stored as the reference broker's JSON envelope
//
//	{"encrypted":"<base64 ciphertext>","iv":"<base64 nonce>","authTag":"<base64 tag>"}
//
// in standard padded base64, with no additional authenticated data, so that a database written
// by either broker opens in the other. Seal draws a fresh random 96-bit nonce per payload and
// stores those 12 bytes. The reference stores a 16-byte IV of which GCM uses the first 12; Open
// accepts both lengths (and, for 16 bytes, also the whole IV as the GCM nonce, which is what a
// Node.js writer given a 16-byte IV produces), so data written by the reference still opens.
package seal

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// KeyVar is the environment variable holding the key.
const KeyVar = "QUEEN_ENCRYPTION_KEY"

const (
	nonceSize    = 12
	refNonceSize = 16 // the reference broker's stored IV
	tagSize      = 16
)

// Key seals and opens payloads. It is safe for concurrent use.
type Key struct {
	gcm   cipher.AEAD // 12-byte nonces
	gcm16 cipher.AEAD // 16-byte nonces, for envelopes whose whole 16-byte IV was the GCM nonce
}

// ParseKey reads a key given as exactly 64 hexadecimal characters (32 bytes, as printed by
// `openssl rand -hex 32`). The error never repeats the value.
func ParseKey(s string) (*Key, error) {
	s = strings.TrimSpace(s)
	if len(s) != 64 {
		return nil, fmt.Errorf("must be exactly 64 hex characters (32 bytes, e.g. openssl rand -hex 32), got %d characters", len(s))
	}
	raw, err := hex.DecodeString(s)
	if err != nil {
		return nil, errors.New("must be 64 hex characters (0-9, a-f): it is not valid hex")
	}
	return NewKey(raw)
}

// NewKey makes a key from 32 raw bytes.
func NewKey(raw []byte) (*Key, error) {
	if len(raw) != 32 {
		return nil, fmt.Errorf("an AES-256 key is 32 bytes, got %d", len(raw))
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	gcm16, err := cipher.NewGCMWithNonceSize(block, refNonceSize)
	if err != nil {
		return nil, err
	}
	return &Key{gcm: gcm, gcm16: gcm16}, nil
}

// Seal encrypts a payload (any JSON value) and returns its envelope, itself a JSON object.
func (k *Key) Seal(payload []byte) (json.RawMessage, error) {
	var nonce [nonceSize]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("cannot draw a nonce: %w", err)
	}
	sealed := k.gcm.Seal(nil, nonce[:], payload, nil)
	ct, tag := sealed[:len(sealed)-tagSize], sealed[len(sealed)-tagSize:]
	enc := base64.StdEncoding
	var b bytes.Buffer
	b.Grow(enc.EncodedLen(len(ct)) + 80)
	b.WriteString(`{"encrypted":"`)
	b.WriteString(enc.EncodeToString(ct))
	b.WriteString(`","iv":"`)
	b.WriteString(enc.EncodeToString(nonce[:]))
	b.WriteString(`","authTag":"`)
	b.WriteString(enc.EncodeToString(tag))
	b.WriteString(`"}`)
	return b.Bytes(), nil
}

// envelope is the stored form of a sealed payload.
type envelope struct {
	Encrypted *string `json:"encrypted"`
	IV        *string `json:"iv"`
	AuthTag   *string `json:"authTag"`
}

// ErrNotEnvelope is returned by Open for a value that is not a sealed payload.
var ErrNotEnvelope = errors.New("not an encrypted payload envelope")

// Open decrypts an envelope and returns the original payload. It fails for anything that is not
// an envelope, for a wrong key or damaged data (the GCM tag does not match), and for a
// plaintext that is not JSON.
func (k *Key) Open(stored []byte) (json.RawMessage, error) {
	var e envelope
	if err := json.Unmarshal(stored, &e); err != nil || e.Encrypted == nil || e.IV == nil || e.AuthTag == nil {
		return nil, ErrNotEnvelope
	}
	ct, err1 := decode64(*e.Encrypted)
	iv, err2 := decode64(*e.IV)
	tag, err3 := decode64(*e.AuthTag)
	if jerr := errors.Join(err1, err2, err3); jerr != nil {
		return nil, fmt.Errorf("malformed envelope: %w", jerr)
	}
	if len(tag) != tagSize {
		return nil, fmt.Errorf("malformed envelope: authTag is %d bytes, want %d", len(tag), tagSize)
	}
	sealed := make([]byte, 0, len(ct)+tagSize)
	sealed = append(append(sealed, ct...), tag...)
	var plain []byte
	var err error
	switch len(iv) {
	case nonceSize:
		plain, err = k.gcm.Open(nil, iv, sealed, nil)
	case refNonceSize:
		// The reference keeps 16 IV bytes and uses the first 12 as the nonce.
		if plain, err = k.gcm.Open(nil, iv[:nonceSize], sealed, nil); err != nil {
			plain, err = k.gcm16.Open(nil, iv, sealed, nil)
		}
	default:
		return nil, fmt.Errorf("malformed envelope: iv is %d bytes, want %d or %d", len(iv), nonceSize, refNonceSize)
	}
	if err != nil {
		return nil, errors.New("cannot decrypt: wrong key or damaged data")
	}
	if !json.Valid(plain) {
		return nil, errors.New("decrypted payload is not JSON")
	}
	return plain, nil
}

func decode64(s string) ([]byte, error) {
	if b, err := base64.StdEncoding.DecodeString(s); err == nil {
		return b, nil
	}
	return base64.RawStdEncoding.DecodeString(s)
}

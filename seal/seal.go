// Package seal is payload encryption at rest: AES-256-GCM under the key of QUEEN_ENCRYPTION_KEY,
// for the queues configured with encryptionEnabled.
//
// A sealed payload is stored in the shape of the reference broker's JSON envelope, with one key
// added:
//
//	{"encrypted":"<base64 ciphertext>","iv":"<base64 nonce>","authTag":"<base64 tag>","ctx":1}
//
// in standard padded base64. "ctx":1 says the envelope is bound to its message: the GCM
// associated data is the queue's stored name and the message's transactionId (see
// associatedData), so a ciphertext copied into another message's row, of the same queue or of
// another one, fails its tag check instead of opening as the original plaintext. The marker
// only selects how to check the tag: removing it from a bound envelope, or adding it to an
// unbound one, makes the check fail.
//
// An envelope without the marker is opened with no associated data: envelopes written before
// the binding existed, and those of the reference broker, which binds nothing. Seal draws a
// fresh random 96-bit nonce per payload and stores those 12 bytes. The reference stores a
// 16-byte IV of which GCM uses the first 12; Open accepts both lengths (and, for 16 bytes, also
// the whole IV as the GCM nonce, which is what a Node.js writer given a 16-byte IV produces), so
// data written by the reference still opens.
package seal

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

const (
	nonceSize    = 12
	refNonceSize = 16 // the reference broker's stored IV
	tagSize      = 16

	// boundToMessage is the "ctx" value of an envelope whose associated data is
	// associatedData(queue, transactionID).
	boundToMessage = 1
)

// Key seals and opens payloads. It is safe for concurrent use.
type Key struct {
	gcm   cipher.AEAD // 12-byte nonces
	gcm16 cipher.AEAD // 16-byte nonces, for envelopes whose whole 16-byte IV was the GCM nonce
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

// Seal encrypts a payload (any JSON value) of the message transactionID of queue (its stored
// name, tenant included) and returns its envelope, itself a JSON object, bound to both.
func (k *Key) Seal(payload []byte, queue, transactionID string) (json.RawMessage, error) {
	var nonce [nonceSize]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("cannot draw a nonce: %w", err)
	}
	sealed := k.gcm.Seal(nil, nonce[:], payload, associatedData(queue, transactionID))
	ct, tag := sealed[:len(sealed)-tagSize], sealed[len(sealed)-tagSize:]
	enc := base64.StdEncoding
	var b bytes.Buffer
	b.Grow(enc.EncodedLen(len(ct)) + 90)
	b.WriteString(`{"encrypted":"`)
	b.WriteString(enc.EncodeToString(ct))
	b.WriteString(`","iv":"`)
	b.WriteString(enc.EncodeToString(nonce[:]))
	b.WriteString(`","authTag":"`)
	b.WriteString(enc.EncodeToString(tag))
	b.WriteString(`","ctx":`)
	b.WriteString(strconv.Itoa(boundToMessage))
	b.WriteString(`}`)
	return b.Bytes(), nil
}

// associatedData encodes the message an envelope is bound to: each field preceded by its length
// (4 bytes, big-endian), so that no two (queue, transactionID) pairs encode alike ("ab","c" and
// "a","bc" would under a plain concatenation).
func associatedData(queue, transactionID string) []byte {
	ad := make([]byte, 0, 8+len(queue)+len(transactionID))
	ad = binary.BigEndian.AppendUint32(ad, uint32(len(queue)))
	ad = append(ad, queue...)
	ad = binary.BigEndian.AppendUint32(ad, uint32(len(transactionID)))
	return append(ad, transactionID...)
}

// envelope is the stored form of a sealed payload.
type envelope struct {
	Encrypted *string `json:"encrypted"`
	IV        *string `json:"iv"`
	AuthTag   *string `json:"authTag"`
	Ctx       *int    `json:"ctx"` // boundToMessage, or absent for an unbound envelope
}

// ErrNotEnvelope is returned by Open for a value that is not a sealed payload.
var ErrNotEnvelope = errors.New("not an encrypted payload envelope")

// Open decrypts the envelope stored for the message transactionID of queue and returns the
// original payload. It fails for anything that is not an envelope, for a wrong key, damaged data
// or a bound envelope of another message (the GCM tag does not match), and for a plaintext that
// is not JSON.
func (k *Key) Open(stored []byte, queue, transactionID string) (json.RawMessage, error) {
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
	var ad []byte // nil: an unbound envelope
	if e.Ctx != nil {
		if *e.Ctx != boundToMessage {
			return nil, fmt.Errorf("malformed envelope: unknown ctx %d", *e.Ctx)
		}
		ad = associatedData(queue, transactionID)
	}
	sealed := make([]byte, 0, len(ct)+tagSize)
	sealed = append(append(sealed, ct...), tag...)
	var plain []byte
	var err error
	switch len(iv) {
	case nonceSize:
		plain, err = k.gcm.Open(nil, iv, sealed, ad)
	case refNonceSize:
		// The reference keeps 16 IV bytes and uses the first 12 as the nonce.
		if plain, err = k.gcm.Open(nil, iv[:nonceSize], sealed, ad); err != nil {
			plain, err = k.gcm16.Open(nil, iv, sealed, ad)
		}
	default:
		return nil, fmt.Errorf("malformed envelope: iv is %d bytes, want %d or %d", len(iv), nonceSize, refNonceSize)
	}
	if err != nil {
		return nil, errors.New("cannot decrypt: wrong key, damaged data or another message's envelope")
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

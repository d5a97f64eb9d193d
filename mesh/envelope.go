package mesh

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// After the handshake every frame's payload is an envelope
//
//	{"seq":N,"mac":"<base64 HMAC-SHA256(k, u64be(seq) || type || body)>","body":<frame JSON>}
//
// where k is the connection's session key. The MAC binds the type byte (a valid frame cannot be
// re-typed into a maintenance flip) and the sequence number, which starts at 1 on each
// connection and must grow by exactly one: a replayed, reordered or dropped frame is refused.

var (
	// ErrMalformedEnvelope is returned for a payload that is not a well-formed envelope.
	ErrMalformedEnvelope = errors.New("malformed envelope")
	// ErrBadMAC is returned when the envelope's MAC does not verify.
	ErrBadMAC = errors.New("bad frame MAC")
	// ErrSequence is returned for an authentic frame whose sequence number is not the next one.
	ErrSequence = errors.New("frame out of sequence")
	// errNoKey guards against sealing or opening with an empty key, which would verify anything
	// anyone computes.
	errNoKey = errors.New("empty session key")
)

// frameMAC is HMAC-SHA256(key, u64be(seq) || typ || body).
func frameMAC(key []byte, seq uint64, typ byte, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	var pre [9]byte
	binary.BigEndian.PutUint64(pre[:8], seq)
	pre[8] = typ
	h.Write(pre[:])
	h.Write(body)
	return h.Sum(nil)
}

// SealEnvelope wraps body (a JSON value) for frame type typ with sequence number seq. The body
// is compacted first and the MAC computed over exactly the bytes written, because the receiver
// checks the MAC over the bytes it receives.
func SealEnvelope(key []byte, seq uint64, typ byte, body []byte) ([]byte, error) {
	if len(key) == 0 {
		return nil, fmt.Errorf("cannot seal frame: %w", errNoKey)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, body); err != nil {
		return nil, fmt.Errorf("cannot seal frame body: %w", err)
	}
	b := compact.Bytes()
	mac := frameMAC(key, seq, typ, b)
	out := make([]byte, 0, len(b)+80)
	out = append(out, `{"seq":`...)
	out = strconv.AppendUint(out, seq, 10)
	out = append(out, `,"mac":"`...)
	out = base64.StdEncoding.AppendEncode(out, mac)
	out = append(out, `","body":`...)
	out = append(out, b...)
	out = append(out, '}')
	return out, nil
}

// OpenEnvelope checks an envelope received as the payload of a frame of type typ and returns its
// body. The MAC is checked first (in constant time), then the sequence number against want:
// an error matching ErrBadMAC or ErrMalformedEnvelope means the frame is not authentic, one
// matching ErrSequence means it is authentic but replayed, reordered or preceded by a loss.
func OpenEnvelope(key []byte, want uint64, typ byte, payload []byte) ([]byte, error) {
	if len(key) == 0 {
		return nil, fmt.Errorf("cannot open frame: %w", errNoKey)
	}
	var env struct {
		Seq  *uint64         `json:"seq"`
		MAC  []byte          `json:"mac"`
		Body json.RawMessage `json:"body"` // raw: the MAC covers the bytes as received
	}
	if err := json.Unmarshal(payload, &env); err != nil {
		return nil, fmt.Errorf("cannot open frame: %w: %v", ErrMalformedEnvelope, err)
	}
	if env.Seq == nil || len(env.MAC) != sha256.Size || len(env.Body) == 0 {
		return nil, fmt.Errorf("cannot open frame: %w: missing seq, mac or body", ErrMalformedEnvelope)
	}
	if !hmac.Equal(env.MAC, frameMAC(key, *env.Seq, typ, env.Body)) {
		return nil, fmt.Errorf("cannot open frame seq %d type %d: %w", *env.Seq, typ, ErrBadMAC)
	}
	if *env.Seq != want {
		return nil, fmt.Errorf("cannot open frame: %w: got seq %d, want %d", ErrSequence, *env.Seq, want)
	}
	return env.Body, nil
}

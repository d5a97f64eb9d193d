package mesh

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Handshake, on every new connection (dialer D, listener L, shared secret s):
//
//	L → D  CHALLENGE  {nonce: nonce_l}                         fresh 32 random bytes
//	D → L  HELLO      {server_id, nonce: nonce_d, challenge: nonce_l,
//	                   mac: HMAC(s, "queen-mesh-hello" || nonce_l || nonce_d || server_id)}
//	L → D  HELLO_ACK  {server_id: L's id,
//	                   mac: HMAC(s, "queen-mesh-ack" || nonce_d || nonce_l || L's server_id)}
//
// Both sides then derive k = HMAC(s, "queen-mesh-session" || nonce_l || nonce_d), the key of
// every later frame's envelope. Byte fields travel as standard base64.
//
// Why each piece: the listener's nonce makes a captured HELLO useless on a new connection (it
// answers an old challenge); the ACK proves to the dialer that the listener holds the secret;
// the session key, which only holders of the secret can derive, means that relaying a genuine
// HELLO gains an attacker nothing, since it cannot author a single frame afterwards. The labels
// keep the three MACs apart, and the nonces have a fixed length so the concatenations are
// unambiguous.
//
// With an empty secret the same frames are exchanged (so each side learns the other's
// server_id) but nothing is checked and no session key exists.

const nonceSize = 32

// maxServerIDLen bounds what a peer may announce; ids end up in logs and stats.
const maxServerIDLen = 255

// ErrHandshake is matched by every handshake refusal.
var ErrHandshake = errors.New("mesh handshake refused")

type challengeMsg struct {
	Nonce []byte `json:"nonce"`
}

type helloMsg struct {
	ServerID  string `json:"server_id"`
	Nonce     []byte `json:"nonce"`
	Challenge []byte `json:"challenge"`
	MAC       []byte `json:"mac,omitempty"`
}

type helloAckMsg struct {
	ServerID string `json:"server_id"`
	MAC      []byte `json:"mac,omitempty"`
}

// session is what a completed handshake yields.
type session struct {
	peerID string
	key    []byte // nil when the mesh is unauthenticated
}

func labelledMAC(secret []byte, label string, parts ...[]byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(label))
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}

func helloMAC(secret, nonceL, nonceD []byte, serverID string) []byte {
	return labelledMAC(secret, "queen-mesh-hello", nonceL, nonceD, []byte(serverID))
}

func ackMAC(secret, nonceD, nonceL []byte, serverID string) []byte {
	return labelledMAC(secret, "queen-mesh-ack", nonceD, nonceL, []byte(serverID))
}

func sessionKey(secret, nonceL, nonceD []byte) []byte {
	return labelledMAC(secret, "queen-mesh-session", nonceL, nonceD)
}

func newNonce() []byte {
	n := make([]byte, nonceSize)
	rand.Read(n) // never fails (crypto/rand since Go 1.24)
	return n
}

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrHandshake, fmt.Sprintf(format, args...))
}

func validServerID(id string) bool { return id != "" && len(id) <= maxServerIDLen }

// readHandshakeFrame reads one frame of type want and decodes it into v.
func readHandshakeFrame(r io.Reader, want byte, v any) error {
	typ, payload, err := ReadFrame(r, handshakeMaxFrame)
	if err != nil {
		return err
	}
	if typ != want {
		return refuse("expected frame type %d, got %d", want, typ)
	}
	if err := json.Unmarshal(payload, v); err != nil {
		return refuse("malformed frame type %d: %v", typ, err)
	}
	return nil
}

func writeHandshakeFrame(w io.Writer, typ byte, v any) error {
	payload, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("cannot encode handshake frame: %w", err)
	}
	return WriteFrame(w, typ, payload)
}

// acceptHandshake runs the listener's side on a freshly accepted connection.
func acceptHandshake(rw io.ReadWriter, selfID string, secret []byte) (session, error) {
	nonceL := newNonce()
	if err := writeHandshakeFrame(rw, TypeChallenge, challengeMsg{Nonce: nonceL}); err != nil {
		return session{}, fmt.Errorf("cannot send challenge: %w", err)
	}
	var hello helloMsg
	if err := readHandshakeFrame(rw, TypeHello, &hello); err != nil {
		return session{}, fmt.Errorf("cannot read hello: %w", err)
	}
	if !validServerID(hello.ServerID) {
		return session{}, refuse("hello has no valid server_id")
	}
	if len(hello.Nonce) != nonceSize {
		return session{}, refuse("hello nonce is %d bytes, want %d", len(hello.Nonce), nonceSize)
	}
	s := session{peerID: hello.ServerID}
	var ack helloAckMsg
	ack.ServerID = selfID
	if len(secret) > 0 {
		// Both checks always run, so timing does not tell which one failed.
		fresh := subtle.ConstantTimeCompare(hello.Challenge, nonceL) == 1
		authentic := hmac.Equal(hello.MAC, helloMAC(secret, nonceL, hello.Nonce, hello.ServerID))
		switch {
		case len(hello.MAC) == 0:
			return session{}, refuse("hello from %q carries no mac (is the peer's QUEEN_SYNC_SECRET empty?)", hello.ServerID)
		case !authentic && fresh:
			return session{}, refuse("hello from %q has a bad mac (wrong QUEEN_SYNC_SECRET?)", hello.ServerID)
		case !fresh:
			return session{}, refuse("hello from %q answers another challenge (replayed hello?)", hello.ServerID)
		}
		ack.MAC = ackMAC(secret, hello.Nonce, nonceL, selfID)
		s.key = sessionKey(secret, nonceL, hello.Nonce)
	}
	if err := writeHandshakeFrame(rw, TypeHelloAck, ack); err != nil {
		return session{}, fmt.Errorf("cannot send hello ack: %w", err)
	}
	return s, nil
}

// dialHandshake runs the dialer's side on a freshly dialed connection.
func dialHandshake(rw io.ReadWriter, selfID string, secret []byte) (session, error) {
	var ch challengeMsg
	if err := readHandshakeFrame(rw, TypeChallenge, &ch); err != nil {
		return session{}, fmt.Errorf("cannot read challenge: %w", err)
	}
	if len(ch.Nonce) != nonceSize {
		return session{}, refuse("challenge nonce is %d bytes, want %d", len(ch.Nonce), nonceSize)
	}
	nonceD := newNonce()
	hello := helloMsg{ServerID: selfID, Nonce: nonceD, Challenge: ch.Nonce}
	if len(secret) > 0 {
		hello.MAC = helloMAC(secret, ch.Nonce, nonceD, selfID)
	}
	if err := writeHandshakeFrame(rw, TypeHello, hello); err != nil {
		return session{}, fmt.Errorf("cannot send hello: %w", err)
	}
	var ack helloAckMsg
	if err := readHandshakeFrame(rw, TypeHelloAck, &ack); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// The listener closes without a word when it refuses a HELLO.
			return session{}, refuse("the peer closed the connection after our hello (different QUEEN_SYNC_SECRET on each side?)")
		}
		return session{}, fmt.Errorf("cannot read hello ack: %w", err)
	}
	if !validServerID(ack.ServerID) {
		return session{}, refuse("hello ack has no valid server_id")
	}
	s := session{peerID: ack.ServerID}
	if len(secret) > 0 {
		if !hmac.Equal(ack.MAC, ackMAC(secret, nonceD, ch.Nonce, ack.ServerID)) {
			return session{}, refuse("hello ack from %q has a bad mac (wrong or empty QUEEN_SYNC_SECRET on the peer?)", ack.ServerID)
		}
		s.key = sessionKey(secret, ch.Nonce, nonceD)
	}
	return s, nil
}

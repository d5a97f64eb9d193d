// Package mesh connects the brokers that share one PostgreSQL so that a push on one wakes the
// pops parked on the others, and so that maintenance flips and queue-config changes reach every
// broker promptly. Everything it carries is a hint: PostgreSQL stays the single source of truth
// and a dropped frame costs latency, never data.
//
// Unlike the reference broker, the mesh authenticates: the listener challenges every dialer
// with a fresh nonce (a captured HELLO does not replay), and every frame after the handshake
// carries a sequence number and an HMAC under a per-connection session key (a forged, altered,
// replayed or reordered frame closes the connection). See handshake.go and envelope.go.
package mesh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frame types. 1–4, 10, 11, 40 and 41 keep the reference broker's values. 7 (CHALLENGE) and 8
// (HELLO_ACK) are this project's handshake additions; 5 and 20 are not reused because the
// reference gives them meaning (HOTLIST_DIRTY_BATCH, EPH_ADMIN), and a frame must never be
// misread by a broker of the other kind.
const (
	TypeMessageAvailable      byte = 1  // {queue, partition}
	TypeMessageAvailableBatch byte = 2  // {items:[{queue, partition}]}
	TypeHeartbeat             byte = 3  // {}
	TypeHello                 byte = 4  // {server_id, nonce, challenge, mac}
	TypeChallenge             byte = 7  // {nonce}
	TypeHelloAck              byte = 8  // {server_id, mac}
	TypeQueueConfigSet        byte = 10 // {queue}
	TypeQueueConfigDelete     byte = 11 // {queue}
	TypeMaintenanceModeSet    byte = 40 // {enabled}
	TypePopMaintenanceModeSet byte = 41 // {enabled}
)

// MaxFrameSize bounds the length field (type byte + payload) of a frame. The mesh only carries
// small hints, so 1 MiB is generous; the reference allows 16 MiB, which lets one connection
// make a broker allocate that much per frame.
const MaxFrameSize = 1 << 20

// handshakeMaxFrame bounds frames read before the peer is authenticated: an unauthenticated
// connection must not make the broker allocate more than this.
const handshakeMaxFrame = 4 << 10

var (
	// ErrFrameTooLarge is returned when a frame's length field exceeds the cap.
	ErrFrameTooLarge = errors.New("frame too large")
	// ErrEmptyFrame is returned for a length field of 0 (a frame has at least its type byte).
	ErrEmptyFrame = errors.New("empty frame")
)

// WriteFrame writes one frame, `u32 big-endian length | u8 type | payload`, in a single Write so
// that concurrent writers never interleave partial frames on one connection.
func WriteFrame(w io.Writer, typ byte, payload []byte) error {
	n := 1 + len(payload)
	if n > MaxFrameSize {
		return fmt.Errorf("cannot write frame of %d bytes: %w", n, ErrFrameTooLarge)
	}
	buf := make([]byte, 5+len(payload))
	binary.BigEndian.PutUint32(buf, uint32(n))
	buf[4] = typ
	copy(buf[5:], payload)
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("cannot write frame: %w", err)
	}
	return nil
}

// ReadFrame reads one frame whose length field (type byte + payload) is at most max. The length
// is checked before anything is allocated, so a hostile header costs nothing. A connection
// closed between frames yields an error matching io.EOF; one closed inside a frame yields
// io.ErrUnexpectedEOF.
func ReadFrame(r io.Reader, max int) (typ byte, payload []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:4]); err != nil {
		return 0, nil, fmt.Errorf("cannot read frame header: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if n == 0 {
		return 0, nil, fmt.Errorf("cannot read frame: %w", ErrEmptyFrame)
	}
	if max < 1 || uint64(n) > uint64(max) {
		return 0, nil, fmt.Errorf("cannot read frame of %d bytes (cap %d): %w", n, max, ErrFrameTooLarge)
	}
	if _, err := io.ReadFull(r, hdr[4:5]); err != nil {
		return 0, nil, fmt.Errorf("cannot read frame type: %w", noEOF(err))
	}
	payload = make([]byte, n-1)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, fmt.Errorf("cannot read frame payload: %w", noEOF(err))
	}
	return hdr[4], payload, nil
}

// noEOF turns an EOF inside a frame into io.ErrUnexpectedEOF: only a close between frames is
// a clean one.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

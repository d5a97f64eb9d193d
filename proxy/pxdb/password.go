package pxdb

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"strings"

	"golang.org/x/crypto/argon2"
)

// argonParams are the cost of a password hash, stored in it so they can change later.
type argonParams struct {
	memoryKiB uint32
	time      uint32
	threads   uint8
}

// defaultArgon is RFC 9106's second recommended setting (64 MiB) with two passes instead of three
// and two lanes: a guess costs an attacker 64 MiB of memory, which is what makes GPUs slow at
// argon2id, while a sign-in costs the proxy some tens of milliseconds on a small machine. A
// password is checked at sign-in only; the session carries the user after that.
var defaultArgon = argonParams{memoryKiB: 64 * 1024, time: 2, threads: 2}

const (
	saltLen = 16
	hashLen = 32
)

// hashSlots bounds the hashes computed at once: each holds 64 MiB, so a burst of sign-ins
// queues here instead of taking the process's memory.
var hashSlots = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))

// dummyHash is what an unknown user's password is checked against: the same cost as a real
// check, and no password matches it.
var dummyHash = formatPHC(defaultArgon, make([]byte, saltLen), make([]byte, hashLen))

// hashPassword returns the argon2id hash of password as a PHC string:
// $argon2id$v=19$m=65536,t=2,p=2$<salt>$<hash>, base64 without padding.
func hashPassword(ctx context.Context, password string) (string, error) {
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("cannot make a salt: %w", err)
	}
	key, err := argonKey(ctx, password, salt, defaultArgon, hashLen)
	if err != nil {
		return "", err
	}
	return formatPHC(defaultArgon, salt, key), nil
}

func formatPHC(p argonParams, salt, key []byte) string {
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.memoryKiB, p.time, p.threads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
}

// verifyPassword reports whether password hashes to the PHC string phc, comparing in constant
// time.
func verifyPassword(ctx context.Context, password, phc string) (bool, error) {
	p, salt, want, err := parsePHC(phc)
	if err != nil {
		return false, err
	}
	got, err := argonKey(ctx, password, salt, p, uint32(len(want)))
	if err != nil {
		return false, err
	}
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}

func parsePHC(phc string) (p argonParams, salt, key []byte, err error) {
	bad := errors.New("the stored password hash is not an argon2id PHC string")
	parts := strings.Split(phc, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" || parts[2] != fmt.Sprintf("v=%d", argon2.Version) {
		return p, nil, nil, bad
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.memoryKiB, &p.time, &p.threads); err != nil ||
		p.memoryKiB == 0 || p.time == 0 || p.threads == 0 {
		return p, nil, nil, bad
	}
	salt, err1 := base64.RawStdEncoding.DecodeString(parts[4])
	key, err2 := base64.RawStdEncoding.DecodeString(parts[5])
	if err1 != nil || err2 != nil || len(salt) == 0 || len(key) == 0 {
		return p, nil, nil, bad
	}
	return p, salt, key, nil
}

// argonKey computes argon2id in one of the hash slots.
func argonKey(ctx context.Context, password string, salt []byte, p argonParams, n uint32) ([]byte, error) {
	select {
	case hashSlots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("cannot hash a password: %w", ctx.Err())
	}
	defer func() { <-hashSlots }()
	return argon2.IDKey([]byte(password), salt, p.time, p.memoryKiB, p.threads, n), nil
}

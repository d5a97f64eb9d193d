package pxdb

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"time"

	"queen/routes"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Key is an API key: bound to one cell and to route classes, until it expires or is revoked.
type Key struct {
	ID        uuid.UUID
	Cell      string
	Classes   []string
	CreatedAt time.Time
	ExpiresAt time.Time
	RevokedAt *time.Time
	Hint      string // the first 8 characters of the secret, to tell keys apart in lists
}

// classes are the route classes a key or a user role may be granted (routes.Grantable), in
// canonical order.
var classes = func() []string {
	out := make([]string, len(routes.Grantable))
	for i, c := range routes.Grantable {
		out[i] = string(c)
	}
	return out
}()

// KeyPrefix starts every secret, so a leaked one is recognisable (secret scanners, logs).
const KeyPrefix = "qpk_"

const keySelect = `SELECT id, cell, classes, created_at, expires_at, revoked_at, hint FROM queen_proxy.api_keys`

// CreateKey makes a key for cell granting the classes until expires, and returns it with its
// secret, which is shown once and never stored. ErrNoCell when the cell does not exist. Audited.
func (s *Store) CreateKey(ctx context.Context, cell string, want []string, expires time.Time, by Actor) (Key, string, error) {
	if err := checkActor(by); err != nil {
		return Key{}, "", err
	}
	granted, err := canonicalClasses(want)
	if err != nil {
		return Key{}, "", err
	}
	if !expires.After(time.Now()) {
		return Key{}, "", invalid("the expiry %s is not in the future", expires.UTC().Format(time.RFC3339))
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return Key{}, "", fmt.Errorf("cannot make a key: %w", err)
	}
	secret := KeyPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	k := Key{ID: uuid.New(), Cell: cell, Classes: granted, Hint: secret[:8]}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
			INSERT INTO queen_proxy.api_keys (id, secret_hash, cell, classes, hint, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING created_at, expires_at`,
			k.ID, secretHash(secret), cell, granted, k.Hint, expires).Scan(&k.CreatedAt, &k.ExpiresAt)
		if isCode(err, foreignKeyViolation) {
			return fmt.Errorf("cell %s: %w", cell, ErrNoCell)
		}
		if err != nil {
			return fmt.Errorf("cannot create a key for cell %s: %w", cell, err)
		}
		return audit(ctx, tx, by, "create_key", "key/"+k.ID.String(), cell)
	})
	if err != nil {
		return Key{}, "", err
	}
	k.CreatedAt, k.ExpiresAt = k.CreatedAt.UTC(), k.ExpiresAt.UTC()
	return k, secret, nil
}

// secretHash is what the database keeps of a secret. A plain SHA-256 suffices: a key is 256
// random bits, so no dictionary or brute force can reverse its hash, and a slow password hash
// would only make every request pay for it.
func secretHash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// canonicalClasses checks the classes (at least one, each grantable) and returns them without
// repeats, in canonical order.
func canonicalClasses(want []string) ([]string, error) {
	if len(want) == 0 {
		return nil, invalid("a key needs at least one class (one of %v)", classes)
	}
	for _, c := range want {
		if !slices.Contains(classes, c) {
			return nil, invalid("class %q is not grantable: must be one of %v", c, classes)
		}
	}
	var out []string
	for _, c := range classes {
		if slices.Contains(want, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// KeyBySecret finds the key whose secret this is; ErrNotFound when none. Revoked and expired
// keys are returned too: the caller refuses them and can say why.
func (s *Store) KeyBySecret(ctx context.Context, secret string) (Key, error) {
	// The lookup is by hash: what an attacker could time is an index search for a value they
	// cannot steer towards a stored one.
	rows, err := s.pool.Query(ctx, keySelect+` WHERE secret_hash = $1`, secretHash(secret))
	if err != nil {
		return Key{}, fmt.Errorf("cannot look up a key: %w", err)
	}
	k, err := pgx.CollectExactlyOneRow(rows, scanKey)
	if errors.Is(err, pgx.ErrNoRows) {
		return Key{}, fmt.Errorf("key: %w", ErrNotFound)
	}
	if err != nil {
		return Key{}, fmt.Errorf("cannot look up a key: %w", err)
	}
	return k, nil
}

// RevokeKey revokes key id; ErrNotFound when there is none. Revoking a revoked key keeps the
// first revocation time. Audited.
func (s *Store) RevokeKey(ctx context.Context, id uuid.UUID, by Actor) error {
	if err := checkActor(by); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var cell string
		err := tx.QueryRow(ctx, `
			UPDATE queen_proxy.api_keys SET revoked_at = COALESCE(revoked_at, now())
			WHERE id = $1 RETURNING cell`, id).Scan(&cell)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("key %s: %w", id, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("cannot revoke key %s: %w", id, err)
		}
		return audit(ctx, tx, by, "revoke_key", "key/"+id.String(), cell)
	})
}

// Keys lists every key, oldest first.
func (s *Store) Keys(ctx context.Context) ([]Key, error) {
	rows, err := s.pool.Query(ctx, keySelect+` ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("cannot list the keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, scanKey)
	if err != nil {
		return nil, fmt.Errorf("cannot list the keys: %w", err)
	}
	return keys, nil
}

func scanKey(row pgx.CollectableRow) (Key, error) {
	var k Key
	err := row.Scan(&k.ID, &k.Cell, &k.Classes, &k.CreatedAt, &k.ExpiresAt, &k.RevokedAt, &k.Hint)
	k.CreatedAt, k.ExpiresAt = k.CreatedAt.UTC(), k.ExpiresAt.UTC()
	if k.RevokedAt != nil {
		t := k.RevokedAt.UTC()
		k.RevokedAt = &t
	}
	return k, err
}

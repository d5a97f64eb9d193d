package pxdb_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"queen/proxy/pxdb"
)

// A key's secret finds the key; its classes come back deduplicated in canonical order; the list
// shows it with its hint.
func TestKeysRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t)
	addCell(t, s, "eu1")
	expires := time.Now().Add(48 * time.Hour).Truncate(time.Microsecond)
	k, secret, err := s.CreateKey(ctx, "eu1", []string{"consume", "produce", "consume"}, expires, admin)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^qpk_[A-Za-z0-9_-]{43}$`).MatchString(secret) {
		t.Fatalf("secret %q is not qpk_ + 32 bytes of base64url", secret)
	}
	want := pxdb.Key{ID: k.ID, Cell: "eu1", Classes: []string{"produce", "consume"}, CreatedAt: k.CreatedAt,
		ExpiresAt: expires.UTC(), Hint: secret[:8]}
	same := func(what string, got pxdb.Key) {
		t.Helper()
		if got.ID != want.ID || got.Cell != want.Cell || !slices.Equal(got.Classes, want.Classes) ||
			!got.CreatedAt.Equal(want.CreatedAt) || !got.ExpiresAt.Equal(want.ExpiresAt) ||
			got.RevokedAt != nil || got.Hint != want.Hint {
			t.Errorf("%s = %+v, want %+v", what, got, want)
		}
	}
	same("CreateKey", k)
	if k.ID == uuid.Nil || k.CreatedAt.IsZero() {
		t.Fatalf("key without id or creation time: %+v", k)
	}
	got, err := s.KeyBySecret(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	same("KeyBySecret", got)
	keys, err := s.Keys(ctx)
	if err != nil || len(keys) != 1 {
		t.Fatalf("Keys = %+v, %v; want the one key", keys, err)
	}
	same("Keys[0]", keys[0])

	// Another secret, or one that differs by a character, finds nothing.
	k2, secret2, err := s.CreateKey(ctx, "eu1", []string{"read"}, expires, admin)
	if err != nil || k2.ID == k.ID || secret2 == secret {
		t.Fatalf("second key %+v %q %v: want a distinct key", k2, secret2, err)
	}
	for _, bad := range []string{"", "qpk_", secret[:len(secret)-1] + "x", secret + "x", strings.TrimPrefix(secret, "qpk_")} {
		if bad == secret || bad == secret2 {
			continue
		}
		if _, err := s.KeyBySecret(ctx, bad); !errors.Is(err, pxdb.ErrNotFound) {
			t.Errorf("KeyBySecret(%q): %v, want ErrNotFound", bad, err)
		}
	}
}

func TestCreateKeyRefusals(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t)
	addCell(t, s, "eu1")
	later := time.Now().Add(time.Hour)
	for name, c := range map[string]struct {
		cell    string
		classes []string
		expires time.Time
		want    error
		naming  string
	}{
		"unknown cell":  {"nope", []string{"read"}, later, pxdb.ErrNoCell, "nope"},
		"no class":      {"eu1", nil, later, pxdb.ErrInvalid, "class"},
		"blocked":       {"eu1", []string{"read", "blocked"}, later, pxdb.ErrInvalid, `"blocked"`},
		"unknown class": {"eu1", []string{"admin"}, later, pxdb.ErrInvalid, `"admin"`},
		"expired":       {"eu1", []string{"read"}, time.Now().Add(-time.Second), pxdb.ErrInvalid, "future"},
		"zero expiry":   {"eu1", []string{"read"}, time.Time{}, pxdb.ErrInvalid, "future"},
	} {
		_, secret, err := s.CreateKey(ctx, c.cell, c.classes, c.expires, admin)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.naming) || secret != "" {
			t.Errorf("%s: %q, %v; want %v naming %s", name, secret, err, c.want, c.naming)
		}
	}
	if keys, err := s.Keys(ctx); err != nil || len(keys) != 0 {
		t.Fatalf("keys after refusals: %+v, %v", keys, err)
	}
}

// The database holds no secret: not in any table of the schema, in any form a row prints.
func TestKeySecretIsNotStored(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, cs := newStore(t)
	addCell(t, s, "eu1")
	k, secret, err := s.CreateKey(ctx, "eu1", []string{"read"}, time.Now().Add(time.Hour), admin)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeKey(ctx, k.ID, admin); err != nil {
		t.Fatal(err)
	}
	dump := dumpSchema(t, cs)
	if !strings.Contains(dump, k.ID.String()) {
		t.Fatalf("the dump misses the key's row, so it proves nothing:\n%s", dump)
	}
	for _, part := range []string{secret, strings.TrimPrefix(secret, "qpk_"), secret[8:]} {
		if strings.Contains(dump, part) {
			t.Fatalf("the database holds the secret (%q):\n%s", part, dump)
		}
	}
}

// dumpSchema prints every row of every table of schema queen_proxy, as the owner sees them.
func dumpSchema(t *testing.T, connString string) string {
	t.Helper()
	ctx := testContext(t)
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'queen_proxy' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) < 4 {
		t.Fatalf("tables of queen_proxy: %v, %v", tables, err)
	}
	var b strings.Builder
	for _, table := range tables {
		var text string
		q := "SELECT COALESCE(string_agg(t::text, E'\\n'), '') FROM " + pgx.Identifier{"queen_proxy", table}.Sanitize() + " t"
		if err := conn.QueryRow(ctx, q).Scan(&text); err != nil {
			t.Fatal(err)
		}
		b.WriteString(table + ":\n" + text + "\n")
	}
	return b.String()
}

// KeyBySecret returns revoked and expired keys with RevokedAt and ExpiresAt telling why they
// are refused; a second revocation keeps the first time.
func TestKeyBySecretReturnsRevokedAndExpiredKeys(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, cs := newStore(t)
	addCell(t, s, "eu1")
	revoked, revokedSecret, err := s.CreateKey(ctx, "eu1", []string{"read"}, time.Now().Add(time.Hour), admin)
	if err != nil {
		t.Fatal(err)
	}
	expired, expiredSecret, err := s.CreateKey(ctx, "eu1", []string{"read"}, time.Now().Add(time.Hour), admin)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeKey(ctx, revoked.ID, admin); err != nil {
		t.Fatal(err)
	}
	got, err := s.KeyBySecret(ctx, revokedSecret)
	if err != nil || got.ID != revoked.ID || got.RevokedAt == nil {
		t.Fatalf("revoked key: %+v, %v; want it with RevokedAt", got, err)
	}
	first := *got.RevokedAt
	if err := s.RevokeKey(ctx, revoked.ID, admin); err != nil {
		t.Fatalf("second revocation: %v", err)
	}
	if again, err := s.KeyBySecret(ctx, revokedSecret); err != nil || again.RevokedAt == nil || !again.RevokedAt.Equal(first) {
		t.Fatalf("after a second revocation RevokedAt = %v (%v), want the first %v", again.RevokedAt, err, first)
	}
	if err := s.RevokeKey(ctx, uuid.New(), admin); !errors.Is(err, pxdb.ErrNotFound) {
		t.Fatalf("revoking an unknown key: %v, want ErrNotFound", err)
	}

	// Nothing in the store makes a key that has already expired: age one as the owner.
	past := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	conn, err := pgx.Connect(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `UPDATE queen_proxy.api_keys SET expires_at = $1 WHERE id = $2`, past, expired.ID); err != nil {
		t.Fatal(err)
	}
	got, err = s.KeyBySecret(ctx, expiredSecret)
	if err != nil || got.ID != expired.ID || !got.ExpiresAt.Equal(past) || got.RevokedAt != nil {
		t.Fatalf("expired key: %+v, %v; want it with ExpiresAt %v and no RevokedAt", got, err, past)
	}
}

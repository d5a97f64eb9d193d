package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"queen/testkit"
)

// jwksServer serves a JWKS whose keys the test swaps.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex
	keys    []map[string]string
	status  int
	fetches atomic.Int64
}

func newJWKSServer(t *testing.T) *jwksServer {
	s := &jwksServer{status: 200}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.status != 200 {
			w.WriteHeader(s.status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": s.keys})
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(keys ...map[string]string) {
	s.mu.Lock()
	s.keys = keys
	s.mu.Unlock()
}

func (s *jwksServer) setStatus(code int) {
	s.mu.Lock()
	s.status = code
	s.mu.Unlock()
}

func rsaJWK(kid string, k *rsa.PublicKey) map[string]string {
	return map[string]string{
		"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
		"n": base64.RawURLEncoding.EncodeToString(k.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(k.E)).Bytes()),
	}
}

func edJWK(kid string, k ed25519.PublicKey) map[string]string {
	return map[string]string{"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": base64.RawURLEncoding.EncodeToString(k)}
}

func jwksConfig(url, alg string) Config {
	c := Defaults()
	c.Algorithm, c.JWKSURL, c.JWKSMinRefetch = alg, url, 0
	return c
}

// A new kid is picked up by the re-fetch an unknown kid triggers; a kid removed from the JWKS
// stops verifying at the next fetch; the periodic refresh does the same without any request.
func TestJWKSRotation(t *testing.T) {
	srv := newJWKSServer(t)
	k1, k2 := rsaKey(t, 0), rsaKey(t, 1)
	srv.set(rsaJWK("k1", &k1.PublicKey))
	v := newVerifier(t, jwksConfig(srv.URL, "RS256"))
	tok := func(k *rsa.PrivateKey, kid string) string {
		return testkit.SignJWT(t, jwt.SigningMethodRS256, k, kid, jwt.MapClaims{"role": "admin"})
	}
	if _, err := v.Verify(tok(k1, "k1")); err != nil {
		t.Fatalf("k1: %v", err)
	}
	srv.set(rsaJWK("k1", &k1.PublicKey), rsaJWK("k2", &k2.PublicKey))
	if _, err := v.Verify(tok(k2, "k2")); err != nil {
		t.Fatalf("k2 after rotation: %v", err)
	}
	if _, err := v.Verify(tok(k1, "k2")); err != ErrBadSignature {
		t.Fatalf("k1's signature under kid k2: %v", err)
	}
	srv.set(rsaJWK("k2", &k2.PublicKey))
	if _, err := v.Verify(tok(k1, "k1")); err != nil {
		t.Fatalf("k1 is still cached until the next fetch: %v", err)
	}
	// Any unknown kid re-fetches, which drops k1.
	if _, err := v.Verify(tok(k1, "k9")); err == nil || err.Message != "Unknown key ID: k9" {
		t.Fatalf("unknown kid: %v", err)
	}
	if _, err := v.Verify(tok(k1, "k1")); err == nil || err.Message != "Unknown key ID: k1" {
		t.Fatalf("removed kid: %v", err)
	}
	// An empty kid uses the first key of the token's kind.
	if _, err := v.Verify(tok(k2, "")); err != nil {
		t.Fatalf("no kid: %v", err)
	}
}

// nextRefresh waits for the periodic refresh to report its next outcome.
func nextRefresh(t *testing.T, refreshed <-chan error) error {
	t.Helper()
	select {
	case err := <-refreshed:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("no periodic JWKS refresh within 10 s")
		return nil
	}
}

// The periodic refresh rotates the keys without any request asking for it, and a failing one
// keeps the cached keys.
func TestJWKSPeriodicRefresh(t *testing.T) {
	srv := newJWKSServer(t)
	k1, k2 := rsaKey(t, 0), rsaKey(t, 1)
	srv.set(rsaJWK("k1", &k1.PublicKey))
	refreshed := make(chan error)
	c := jwksConfig(srv.URL, "RS256")
	c.JWKSRefresh, c.JWKSMinRefetch = 20*time.Millisecond, time.Hour // no re-fetch on unknown kids
	c.refreshed = refreshed
	v := newVerifier(t, c)
	verify := func(k *rsa.PrivateKey, kid string) *Error {
		_, err := v.Verify(testkit.SignJWT(t, jwt.SigningMethodRS256, k, kid, jwt.MapClaims{}))
		return err
	}
	// The refresher hands over each outcome before it fetches again: the first refresh after
	// the rotation may have fetched before it, the second began after it.
	srv.set(rsaJWK("k2", &k2.PublicKey))
	for range 2 {
		if err := nextRefresh(t, refreshed); err != nil {
			t.Fatalf("refresh: %v", err)
		}
	}
	if err := verify(k1, "k1"); err == nil || err.Message != "Unknown key ID: k1" {
		t.Fatalf("k1 after the periodic refresh rotated it out: %v", err)
	}
	if err := verify(k2, "k2"); err != nil {
		t.Fatalf("k2 after the periodic refresh rotated it in: %v", err)
	}

	srv.setStatus(503)
	for range 2 {
		if err := nextRefresh(t, refreshed); err != nil {
			t.Logf("refresh failed as wanted: %v", err)
			if err := verify(k2, "k2"); err != nil {
				t.Fatalf("k2 after a failed refresh: %v", err)
			}
			return
		}
	}
	t.Fatal("a refresh that began after the endpoint failed succeeded")
}

// Unknown kids re-fetch at most once per JWT_JWKS_MIN_REFETCH_MS, and a failed re-fetch is a 500.
func TestJWKSRefetchThrottleAndFailure(t *testing.T) {
	srv := newJWKSServer(t)
	k1 := rsaKey(t, 0)
	srv.set(rsaJWK("k1", &k1.PublicKey))
	c := jwksConfig(srv.URL, "RS256")
	c.JWKSMinRefetch = time.Hour
	v := newVerifier(t, c)
	clock := time.Now()
	var mu sync.Mutex
	v.jwks.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	before := srv.fetches.Load()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kid := "made-up-" + string(rune('a'+i))
			if _, err := v.Verify(testkit.SignJWT(t, jwt.SigningMethodRS256, k1, kid, jwt.MapClaims{})); err == nil || err.Message != "Unknown key ID: "+kid {
				t.Errorf("kid %s: %v", kid, err)
			}
		}()
	}
	wg.Wait()
	if n := srv.fetches.Load() - before; n != 0 {
		t.Fatalf("%d fetches inside the throttle window (the boot fetch is recent)", n)
	}
	advance(2 * time.Hour)
	srv.setStatus(500)
	if _, err := v.Verify(testkit.SignJWT(t, jwt.SigningMethodRS256, k1, "new", jwt.MapClaims{})); err != ErrJWKSFetch {
		t.Fatalf("failed re-fetch: %v", err)
	}
	if _, err := v.Verify(testkit.SignJWT(t, jwt.SigningMethodRS256, k1, "k1", jwt.MapClaims{})); err != nil {
		t.Fatalf("cached k1 after a failed fetch: %v", err)
	}
	if n := srv.fetches.Load() - before; n != 1 {
		t.Fatalf("%d fetches, want 1", n)
	}
}

func TestJWKSKeyKinds(t *testing.T) {
	srv := newJWKSServer(t)
	edPub, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	k1 := rsaKey(t, 0)
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	srv.set(
		map[string]string{"kty": "EC", "kid": "ec", "crv": "P-256", "x": "AA", "y": "AA"},
		rsaJWK("small", &small.PublicKey),
		map[string]string{"kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB"},
		edJWK("ed", edPub),
		rsaJWK("rsa", &k1.PublicKey),
	)
	v := newVerifier(t, jwksConfig(srv.URL, "auto"))
	if v.jwks.size() != 2 {
		t.Fatalf("%d usable keys, want 2 (ed, rsa)", v.jwks.size())
	}
	if _, err := v.Verify(testkit.SignJWT(t, jwt.SigningMethodEdDSA, edPriv, "ed", jwt.MapClaims{})); err != nil {
		t.Errorf("EdDSA from JWKS: %v", err)
	}
	if _, err := v.Verify(testkit.SignJWT(t, jwt.SigningMethodRS256, k1, "rsa", jwt.MapClaims{})); err != nil {
		t.Errorf("RS256 from JWKS: %v", err)
	}
	// A kid naming a key of another kind, or one restricted to another alg.
	if _, err := v.Verify(testkit.SignJWT(t, jwt.SigningMethodRS256, k1, "ed", jwt.MapClaims{})); err != ErrBadSignature {
		t.Errorf("RS token with an Ed kid: %v", err)
	}
	if _, err := v.Verify(testkit.SignJWT(t, jwt.SigningMethodRS512, k1, "rsa", jwt.MapClaims{})); err != ErrBadSignature {
		t.Errorf("RS512 token with a JWK restricted to RS256: %v", err)
	}
	// With auto and no JWT_SECRET, HS tokens are not accepted at all.
	if _, err := v.Verify(testkit.SignJWT(t, jwt.SigningMethodHS256, []byte("x"), "", jwt.MapClaims{})); err == nil || !strings.HasPrefix(err.Message, "Token uses HS256, expected RS256|") {
		t.Errorf("HS token: %v", err)
	}
}

// The boot refuses a JWKS it cannot fetch, one with no usable key, and one without a key of
// an algorithm only it can verify.
func TestJWKSBootFailures(t *testing.T) {
	srv := newJWKSServer(t)
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	redirect := httptest.NewServer(http.RedirectHandler(srv.URL, http.StatusFound))
	defer redirect.Close()
	cases := []struct {
		name, url, alg string
		keys           []map[string]string
		status         int
		want           string
	}{
		{"unreachable", deadURL + "/jwks", "RS256", nil, 200, "pre-fetch failed"},
		{"http error", srv.URL, "RS256", nil, 404, "status 404"},
		{"redirect not followed", redirect.URL, "RS256", []map[string]string{rsaJWK("k", &rsaKey(t, 0).PublicKey)}, 200, "status 302"},
		{"no usable key", srv.URL, "RS256", []map[string]string{{"kty": "EC", "kid": "x"}}, 200, "no usable key"},
		{"no key of the chosen kind", srv.URL, "RS256", []map[string]string{edJWK("ed", edPub)}, 200, "holds no RSA key"},
	}
	for _, tc := range cases {
		srv.set(tc.keys...)
		srv.setStatus(tc.status)
		c := jwksConfig(tc.url, tc.alg)
		c.JWKSTimeout = 2 * time.Second
		_, err := New(context.Background(), c, quiet)
		if err == nil || !strings.Contains(err.Error(), "JWT_JWKS_URL") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error naming JWT_JWKS_URL with %q", tc.name, err, tc.want)
		}
	}
}

func TestParseJWKSRejectsNonJWKS(t *testing.T) {
	for _, body := range []string{`[]`, `{"k":1}`, `not json`} {
		if _, err := parseJWKS([]byte(body)); err == nil {
			t.Errorf("parseJWKS(%s): want an error", body)
		}
	}
	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"keys":[],"pad":"` + strings.Repeat("x", maxJWKSBytes) + `"}`))
	}))
	defer big.Close()
	c := newJWKSCache(big.URL, time.Second, 0, quiet)
	if _, err := c.fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("oversized JWKS: %v", err)
	}
}

package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"queen/testkit"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// RSA key generation is slow under -race: the tests share a few keys.
var (
	keysOnce sync.Once
	rsaKeys  []*rsa.PrivateKey
)

func rsaKey(t testing.TB, i int) *rsa.PrivateKey {
	t.Helper()
	keysOnce.Do(func() {
		for range 3 {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				panic(err)
			}
			rsaKeys = append(rsaKeys, k)
		}
	})
	return rsaKeys[i]
}

func pemOf(t testing.TB, pub any) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func hsConfig(alg string) Config {
	c := Defaults()
	c.Algorithm, c.Secret = alg, "0123456789abcdef0123456789abcdef"
	return c
}

func newVerifier(t testing.TB, c Config) *Verifier {
	t.Helper()
	v, err := New(context.Background(), c, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v
}

func TestParseAlgorithms(t *testing.T) {
	for in, want := range map[string]string{
		"HS256":        "HS256",
		"hs384":        "HS384",
		"HS512":        "HS512",
		"RS256":        "RS256,RS384,RS512",
		"RS384":        "RS384",
		"RS512":        "RS512",
		"EdDSA":        "EdDSA",
		"auto":         "HS256,HS384,HS512,RS256,RS384,RS512,EdDSA",
		"HS256, EdDSA": "HS256,EdDSA",
	} {
		got, _, err := ParseAlgorithms(in)
		if err != nil || strings.Join(got, ",") != want {
			t.Errorf("ParseAlgorithms(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"RS257", "none", "ES256", "PS256", "HS256,", ""} {
		if _, _, err := ParseAlgorithms(bad); err == nil || !strings.Contains(err.Error(), "JWT_ALGORITHM") {
			t.Errorf("ParseAlgorithms(%q): want an error naming JWT_ALGORITHM, got %v", bad, err)
		}
	}
}

// The five levels are a set: write-only and read-only do not pass each other's routes.
func TestAllowedIsASetNotALadder(t *testing.T) {
	roles := map[string]Roles{"admin": RoleAdmin, "read-write": RoleReadWrite, "read-only": RoleReadOnly, "write-only": RoleWriteOnly, "none": 0}
	want := map[Level]string{
		Public:    "admin read-write read-only write-only none",
		ReadOnly:  "admin read-write read-only",
		WriteOnly: "admin read-write write-only",
		ReadWrite: "admin read-write",
		Admin:     "admin",
	}
	for level, passing := range want {
		for name, r := range roles {
			if got, exp := Allowed(level, r), strings.Contains(" "+passing+" ", " "+name+" "); got != exp {
				t.Errorf("Allowed(%s, %s) = %v, want %v", level, name, got, exp)
			}
		}
	}
	// Holding read-only and write-only together is not read-write.
	if Allowed(ReadWrite, RoleReadOnly|RoleWriteOnly) {
		t.Error("read-only + write-only must not pass a read-write route")
	}
	if Allowed(Level(99), RoleAdmin) {
		t.Error("an unknown level must be refused")
	}
}

func TestSkipPaths(t *testing.T) {
	list, err := ParseSkipPaths(" /health, /assets/ ,/,/x")
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{
		"/health": true, "/health/x": false, "/healthz": false, "/": true, "/api/v1/push": false,
		"/assets/": true, "/assets/app.js": true, "/assets": false, "/x": true, "/x/y": false,
	} {
		if got := skipped(list, path); got != want {
			t.Errorf("skipped(%q) = %v, want %v", path, got, want)
		}
	}
	if _, err := ParseSkipPaths("/health,metrics"); err == nil || !strings.Contains(err.Error(), "JWT_SKIP_PATHS") {
		t.Errorf("want an error naming JWT_SKIP_PATHS, got %v", err)
	}
}

// Every configuration the boot refuses names the variable at fault.
func TestValidateNamesTheVariable(t *testing.T) {
	rsaPEM := pemOf(t, &rsaKey(t, 0).PublicKey)
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	edPEM := pemOf(t, edPub)
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	privDER, _ := x509.MarshalPKCS8PrivateKey(rsaKey(t, 0))
	privPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}))
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"unknown algorithm", func(c *Config) { c.Algorithm = "RS257" }, "JWT_ALGORITHM"},
		{"HS without secret", func(c *Config) { c.Secret = "" }, "JWT_SECRET"},
		{"HS with only a JWKS", func(c *Config) { c.Secret, c.JWKSURL = "", "https://idp.example/jwks" }, "JWT_SECRET"},
		{"RS without key", func(c *Config) { c.Algorithm = "RS256" }, "JWT_JWKS_URL"},
		{"EdDSA without key", func(c *Config) { c.Algorithm = "EdDSA" }, "JWT_PUBLIC_KEY"},
		{"EdDSA with an RSA PEM", func(c *Config) { c.Algorithm, c.PublicKey = "EdDSA", rsaPEM }, "JWT_PUBLIC_KEY"},
		{"RS with an Ed PEM", func(c *Config) { c.Algorithm, c.PublicKey = "RS256", edPEM }, "JWT_PUBLIC_KEY"},
		{"auto without anything", func(c *Config) { c.Algorithm, c.Secret = "auto", "" }, "JWT_SECRET"},
		{"malformed PEM", func(c *Config) {
			c.Algorithm, c.PublicKey = "RS256", "-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----"
		}, "JWT_PUBLIC_KEY"},
		{"not a PEM", func(c *Config) { c.Algorithm, c.PublicKey = "RS256", "hello" }, "JWT_PUBLIC_KEY"},
		{"private key PEM", func(c *Config) { c.Algorithm, c.PublicKey = "RS256", privPEM }, "JWT_PUBLIC_KEY"},
		{"short RSA key", func(c *Config) { c.Algorithm, c.PublicKey = "RS256", pemOf(t, &small.PublicKey) }, "JWT_PUBLIC_KEY"},
		{"JWKS URL not http", func(c *Config) { c.Algorithm, c.JWKSURL = "RS256", "ftp://idp/jwks" }, "JWT_JWKS_URL"},
		{"JWKS URL without host", func(c *Config) { c.Algorithm, c.JWKSURL = "RS256", "https:///jwks" }, "JWT_JWKS_URL"},
		{"duplicate role names", func(c *Config) { c.RoleReadOnly = "admin" }, "JWT_ROLE_READ_ONLY"},
		{"empty roles claim", func(c *Config) { c.RolesClaim = " " }, "JWT_ROLES_CLAIM"},
		{"skip path without slash", func(c *Config) { c.SkipPaths = []string{"health"} }, "JWT_SKIP_PATHS"},
	}
	for _, tc := range cases {
		c := hsConfig("HS256")
		tc.edit(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
	// Disabled: nothing is checked.
	if err := (Config{Algorithm: "RS257"}).Validate(); err != nil {
		t.Errorf("a disabled configuration must be valid: %v", err)
	}
	// auto narrows to what has keys.
	c := hsConfig("auto")
	v := newVerifier(t, c)
	if got := strings.Join(v.Algorithms(), ","); got != "HS256,HS384,HS512" {
		t.Errorf("auto with only JWT_SECRET accepts %s", got)
	}
}

func TestPEMForms(t *testing.T) {
	k := rsaKey(t, 0)
	pkcs1 := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&k.PublicKey)}))
	oneLine := strings.ReplaceAll(pemOf(t, &k.PublicKey), "\n", `\n`)
	for name, p := range map[string]string{"pkix": pemOf(t, &k.PublicKey), "pkcs1": pkcs1, "escaped newlines": oneLine} {
		key, err := ParsePublicKeyPEM(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !k.PublicKey.Equal(key) {
			t.Fatalf("%s: wrong key", name)
		}
	}
}

func TestVerifyHS(t *testing.T) {
	c := hsConfig("HS256")
	c.Issuer, c.Audience = "https://idp.example", "queen"
	v := newVerifier(t, c)
	secret := []byte(c.Secret)
	now := time.Now()
	base := func(extra jwt.MapClaims) jwt.MapClaims {
		m := jwt.MapClaims{"sub": "user-7", "role": "read-write", "iss": "https://idp.example", "aud": "queen", "exp": now.Add(time.Hour).Unix()}
		for k, x := range extra {
			if x == nil {
				delete(m, k)
			} else {
				m[k] = x
			}
		}
		return m
	}
	hs := func(extra jwt.MapClaims) string {
		return testkit.SignJWT(t, jwt.SigningMethodHS256, secret, "", base(extra))
	}
	cases := []struct {
		name, token, want string
	}{
		{"valid", hs(nil), ""},
		{"no exp is accepted", hs(jwt.MapClaims{"exp": nil}), ""},
		{"aud array, one match", hs(jwt.MapClaims{"aud": []string{"other", "queen"}}), ""},
		{"expired within skew", hs(jwt.MapClaims{"exp": now.Add(-10 * time.Second).Unix()}), ""},
		{"expired", hs(jwt.MapClaims{"exp": now.Add(-time.Minute).Unix()}), "Token has expired"},
		{"not yet valid", hs(jwt.MapClaims{"nbf": now.Add(time.Minute).Unix()}), "Token not yet valid"},
		{"nbf within skew", hs(jwt.MapClaims{"nbf": now.Add(10 * time.Second).Unix()}), ""},
		{"issued in the future", hs(jwt.MapClaims{"iat": now.Add(time.Minute).Unix()}), "Token issued in the future"},
		{"wrong issuer", hs(jwt.MapClaims{"iss": "https://evil.example"}), "Invalid token issuer"},
		{"no issuer", hs(jwt.MapClaims{"iss": nil}), "Invalid token issuer"},
		{"wrong audience", hs(jwt.MapClaims{"aud": "other"}), "Invalid token audience"},
		{"no audience", hs(jwt.MapClaims{"aud": nil}), "Invalid token audience"},
		{"wrong secret", testkit.SignJWT(t, jwt.SigningMethodHS256, []byte("another secret of enough length!"), "", base(nil)), "Invalid token signature"},
		{"HS384 not accepted", testkit.SignJWT(t, jwt.SigningMethodHS384, secret, "", base(nil)), "Token uses HS384, expected HS256"},
		{"RS256 not accepted", testkit.SignJWT(t, jwt.SigningMethodRS256, rsaKey(t, 0), "", base(nil)), "Token uses RS256, expected HS256"},
		{"alg none", testkit.SignJWT(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", base(nil)), "Unsupported algorithm: none"},
		{"two parts", "abc.def", "Token decode error: a token has three dot-separated parts"},
		{"garbage header", "!!!.e30.sig", "Token decode error: the header is not base64url"},
		{"sub not a string", hs(jwt.MapClaims{"sub": 7}), "Token verification failed: sub is not a string"},
		{"header without alg", b64(`{"typ":"JWT"}`) + "." + b64(`{}`) + ".c2ln", "Token decode error: the header has no alg"},
		{"numeric kid", b64(`{"alg":"HS256","kid":7}`) + "." + b64(`{}`) + ".c2ln", "Token decode error: kid must be a string"},
		{"header not an object", b64(`[1]`) + "." + b64(`{}`) + ".c2ln", "Token decode error: the header is not a JSON object"},
	}
	for _, tc := range cases {
		id, err := v.Verify(tc.token)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want == "" && (id.Subject != "user-7" || id.Roles != RoleReadWrite):
			t.Errorf("%s: identity %+v", tc.name, id)
		case tc.want != "" && (err == nil || err.Message != tc.want || err.Status != 401):
			t.Errorf("%s: got %v, want 401 %q", tc.name, err, tc.want)
		}
	}
	// A tampered payload breaks the signature.
	parts := strings.Split(hs(nil), ".")
	forged := testkit.SignJWT(t, jwt.SigningMethodHS256, secret, "", base(jwt.MapClaims{"role": "admin"}))
	parts[1] = strings.Split(forged, ".")[1]
	if _, err := v.Verify(strings.Join(parts, ".")); err != ErrBadSignature {
		t.Errorf("tampered payload: %v", err)
	}
}

func TestAuthorizeHeaderAndRoles(t *testing.T) {
	c := hsConfig("HS256")
	c.RolesClaim, c.RolesArrayClaim, c.RoleWriteOnly, c.RoleAdmin = "scope", "groups", "producer", "ops"
	v := newVerifier(t, c)
	tok := func(claims jwt.MapClaims) string {
		return testkit.SignJWT(t, jwt.SigningMethodHS256, []byte(c.Secret), "", claims)
	}
	producer := tok(jwt.MapClaims{"scope": "producer"})
	reader := tok(jwt.MapClaims{"groups": []any{"x", "read-only"}})
	both := tok(jwt.MapClaims{"scope": "read-only", "groups": []any{"producer"}})
	ops := tok(jwt.MapClaims{"groups": []any{"ops"}})
	oldName := tok(jwt.MapClaims{"role": "admin", "roles": []any{"admin"}}) // default claim names are not read
	cases := []struct {
		header string
		level  Level
		status int
		msg    string
	}{
		{"", ReadOnly, 401, "Authentication required"},
		{"", Public, 0, ""},
		{"   ", Admin, 401, "Authentication required"},
		{"Bearer ", Admin, 401, "Empty token"},
		{"Bearer " + producer, WriteOnly, 0, ""},
		{"bEaReR " + producer, WriteOnly, 0, ""},
		{producer, WriteOnly, 0, ""}, // a bare token
		{"Bearer " + producer, ReadOnly, 403, "Insufficient permissions"},
		{"Bearer " + producer, ReadWrite, 403, "Insufficient permissions"},
		{"Bearer " + reader, ReadOnly, 0, ""},
		{"Bearer " + reader, WriteOnly, 403, "Insufficient permissions"},
		{"Bearer " + both, ReadOnly, 0, ""},
		{"Bearer " + both, WriteOnly, 0, ""},
		{"Bearer " + both, ReadWrite, 403, "Insufficient permissions"},
		{"Bearer " + ops, Admin, 0, ""},
		{"Bearer " + ops, ReadWrite, 0, ""},
		{"Bearer " + oldName, ReadOnly, 403, "Insufficient permissions"},
		{"Basic dXNlcjpwYXNz", ReadOnly, 401, "Token decode error: a token has three dot-separated parts"},
	}
	for i, tc := range cases {
		_, err := v.Authorize([]byte(tc.header), tc.level)
		switch {
		case tc.status == 0 && err != nil:
			t.Errorf("case %d (%s): refused %v", i, tc.level, err)
		case tc.status != 0 && (err == nil || err.Status != tc.status || err.Message != tc.msg):
			t.Errorf("case %d (%s): got %v, want %d %q", i, tc.level, err, tc.status, tc.msg)
		}
	}
}

func TestStaticPublicKeys(t *testing.T) {
	k := rsaKey(t, 0)
	c := Defaults()
	c.Algorithm, c.PublicKey = "RS256", pemOf(t, &k.PublicKey)
	v := newVerifier(t, c)
	for _, m := range []jwt.SigningMethod{jwt.SigningMethodRS256, jwt.SigningMethodRS384, jwt.SigningMethodRS512} {
		if _, err := v.Verify(testkit.SignJWT(t, m, k, "", jwt.MapClaims{"role": "admin"})); err != nil {
			t.Errorf("RS256 setting must accept %s: %v", m.Alg(), err)
		}
	}
	if _, err := v.Verify(testkit.SignJWT(t, jwt.SigningMethodRS256, rsaKey(t, 1), "", jwt.MapClaims{})); err != ErrBadSignature {
		t.Errorf("another RSA key: %v", err)
	}
	// HS token signed with the public key's bytes (the classic confusion attack).
	if _, err := v.Verify(testkit.SignJWT(t, jwt.SigningMethodHS256, []byte(c.PublicKey), "", jwt.MapClaims{"role": "admin"})); err == nil ||
		err.Message != "Token uses HS256, expected RS256|RS384|RS512" {
		t.Errorf("HS token against an RSA key: %v", err)
	}

	edPub, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	c = Defaults()
	c.Algorithm, c.PublicKey = "EdDSA", pemOf(t, edPub)
	v = newVerifier(t, c)
	if _, err := v.Verify(testkit.SignJWT(t, jwt.SigningMethodEdDSA, edPriv, "", jwt.MapClaims{})); err != nil {
		t.Errorf("EdDSA: %v", err)
	}
	if _, err := v.Verify(testkit.SignJWT(t, jwt.SigningMethodRS512, k, "", jwt.MapClaims{})); err == nil || err.Message != "Token uses RS512, expected EdDSA" {
		t.Errorf("RS512 against EdDSA: %v", err)
	}
	if !strings.Contains(v.KeySource(), "Ed25519") {
		t.Errorf("key source %q", v.KeySource())
	}
}

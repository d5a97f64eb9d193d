package server_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"queen/auth"
	"queen/config"
	"queen/pg/pgtest"
	"queen/routes"
	"queen/server"
	"queen/server/servertest"
	"queen/testkit"
)

// RSA key generation is slow under -race: the JWT tests share two keys.
var (
	jwtKeysOnce sync.Once
	jwtKeys     [2]*rsa.PrivateKey
)

func jwtKey(i int) *rsa.PrivateKey {
	jwtKeysOnce.Do(func() {
		for j := range jwtKeys {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				panic(err)
			}
			jwtKeys[j] = k
		}
	})
	return jwtKeys[i]
}

// jwksEndpoint is a JWKS served over loopback whose keys the test rotates.
type jwksEndpoint struct {
	*httptest.Server
	mu   sync.Mutex
	keys map[string]*rsa.PublicKey
	kids []string
}

func newJWKSEndpoint(t *testing.T) *jwksEndpoint {
	e := &jwksEndpoint{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		e.mu.Lock()
		defer e.mu.Unlock()
		keys := []map[string]string{}
		for _, kid := range e.kids {
			k := e.keys[kid]
			keys = append(keys, map[string]string{
				"kty": "RSA", "use": "sig", "kid": kid,
				"n": base64.RawURLEncoding.EncodeToString(k.N.Bytes()),
				"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(k.E)).Bytes()),
			})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": keys})
	}))
	t.Cleanup(e.Close)
	return e
}

// publish replaces the JWKS with kid → key pairs.
func (e *jwksEndpoint) publish(pairs ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.keys, e.kids = map[string]*rsa.PublicKey{}, nil
	for i := 0; i < len(pairs); i += 2 {
		kid := pairs[i].(string)
		e.keys[kid] = &pairs[i+1].(*rsa.PrivateKey).PublicKey
		e.kids = append(e.kids, kid)
	}
}

var pathParam = regexp.MustCompile(`\{[^}]+\}`)

// concrete fills a route pattern's parameters with dummy values (UUIDs where one is parsed).
func concrete(pattern string) string {
	return pathParam.ReplaceAllStringFunc(pattern, func(p string) string {
		switch p {
		case "{leaseId}", "{partitionId}":
			return "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
		case "{file:*}":
			return "app.js"
		}
		return "jwt-walk"
	})
}

type jwtCase struct {
	name   string
	header string
	role   string // for valid tokens: the role they hold ("" none)
	valid  bool
	want   string // the 401 message for invalid ones
}

// Every route of the table, with tokens of each role and with every kind of bad token: public
// routes always pass, the others pass exactly the roles of their level (401 without a valid
// token, 403 with a valid one whose roles do not pass), with the reference's error texts.
func TestJWTRouteAccess(t *testing.T) {
	t.Parallel()
	k1, k2 := jwtKey(0), jwtKey(1)
	idp := newJWKSEndpoint(t)
	idp.publish("k1", k1)
	c := startBroker(t, withJWT(func(j *auth.Config) {
		j.Algorithm, j.JWKSURL, j.Issuer, j.Audience = "RS256", idp.URL+"/jwks.json", "https://idp.test", "queen"
	}))
	now := time.Now()
	claims := func(edit jwt.MapClaims) jwt.MapClaims {
		m := jwt.MapClaims{"iss": "https://idp.test", "aud": []string{"queen"}, "sub": "walker", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
		for k, v := range edit {
			m[k] = v
		}
		return m
	}
	rs := func(edit jwt.MapClaims) string {
		return "Bearer " + testkit.SignJWT(t, jwt.SigningMethodRS256, k1, "k1", claims(edit))
	}
	cases := []jwtCase{
		{name: "admin", header: rs(jwt.MapClaims{"role": "admin"}), role: "admin", valid: true},
		{name: "read-write", header: rs(jwt.MapClaims{"role": "read-write"}), role: "read-write", valid: true},
		{name: "read-only", header: rs(jwt.MapClaims{"roles": []string{"read-only"}}), role: "read-only", valid: true},
		{name: "write-only", header: rs(jwt.MapClaims{"role": "write-only"}), role: "write-only", valid: true},
		{name: "no role", header: rs(nil), valid: true},
		{name: "no token", want: "Authentication required"},
		{name: "expired", header: rs(jwt.MapClaims{"role": "admin", "exp": now.Add(-time.Hour).Unix()}), want: "Token has expired"},
		{name: "wrong signature", header: "Bearer " + testkit.SignJWT(t, jwt.SigningMethodRS256, k2, "k1", claims(jwt.MapClaims{"role": "admin"})), want: "Invalid token signature"},
		{name: "wrong algorithm", header: "Bearer " + testkit.SignJWT(t, jwt.SigningMethodHS256, []byte("a shared secret of 32 bytes!!!!!"), "k1", claims(jwt.MapClaims{"role": "admin"})), want: "Token uses HS256, expected RS256|RS384|RS512"},
		{name: "wrong issuer", header: rs(jwt.MapClaims{"role": "admin", "iss": "https://evil.test"}), want: "Invalid token issuer"},
		{name: "wrong audience", header: rs(jwt.MapClaims{"role": "admin", "aud": "other"}), want: "Invalid token audience"},
		{name: "unknown kid", header: "Bearer " + testkit.SignJWT(t, jwt.SigningMethodRS256, k2, "k-unknown", claims(jwt.MapClaims{"role": "admin"})), want: "Unknown key ID: k-unknown"},
	}
	// The reference's table, written out here rather than taken from package auth.
	passes := map[auth.Level][]string{
		auth.ReadOnly:  {"read-only", "read-write", "admin"},
		auth.WriteOnly: {"write-only", "read-write", "admin"},
		auth.ReadWrite: {"read-write", "admin"},
		auth.Admin:     {"admin"},
	}
	table := routes.Table
	// Paths that match no route are read-write.
	table = append(table,
		routes.Route{Method: "GET", Path: "/queues/orders", Level: routes.UnknownLevel},
		routes.Route{Method: "POST", Path: "/api/v1/no-such-route", Level: routes.UnknownLevel})
	for _, r := range table {
		path := concrete(r.Path)
		for _, tc := range cases {
			cl := c
			if tc.header != "" {
				cl = c.WithHeader("Authorization", tc.header)
			}
			var body any
			if r.Method == "POST" {
				body = "{" // malformed: an allowed route answers 400 and changes nothing
			}
			status, raw := cl.Do(r.Method, path, body)
			var e struct {
				Error string `json:"error"`
				Code  string `json:"code"`
			}
			_ = json.Unmarshal(raw, &e)
			what := fmt.Sprintf("%s %s (%s) with %s", r.Method, path, r.Level, tc.name)
			switch {
			case r.Path == "/auth/me":
				// Public, but it answers the auth question itself: a valid token gets its
				// subject and levels (the dashboard's identity), anything else 401.
				var me struct {
					AuthMode string   `json:"authMode"`
					Levels   []string `json:"levels"`
				}
				_ = json.Unmarshal(raw, &me)
				var want []string
				for _, l := range []auth.Level{auth.ReadOnly, auth.WriteOnly, auth.ReadWrite, auth.Admin} {
					if tc.role != "" && slices.Contains(passes[l], tc.role) {
						want = append(want, l.String())
					}
				}
				if tc.valid && (status != 200 || me.AuthMode != "jwt" || !slices.Equal(me.Levels, want)) {
					t.Errorf("%s: %d %s, want 200 with levels %v", what, status, raw, want)
				}
				if !tc.valid && (status != 401 || e.Code != "auth_required") {
					t.Errorf("%s: %d %s, want 401 auth_required", what, status, raw)
				}
			case r.Level == auth.Public || (tc.valid && slices.Contains(passes[r.Level], tc.role)):
				if status == 401 || status == 403 {
					t.Errorf("%s: denied %d %s", what, status, raw)
				}
			case tc.valid:
				if status != 403 || e.Error != "Insufficient permissions" {
					t.Errorf("%s: %d %s, want 403 Insufficient permissions", what, status, raw)
				}
			default:
				if status != 401 || e.Error != tc.want {
					t.Errorf("%s: %d %s, want 401 %q", what, status, raw, tc.want)
				}
			}
		}
	}
	t.Logf("%d routes × %d tokens checked", len(table), len(cases))
	// The write-only token can push and cannot read back; the read-only one the reverse.
	wo, ro := c.WithHeader("Authorization", cases[3].header), c.WithHeader("Authorization", cases[2].header)
	wo.JSON("POST", "/api/v1/push", map[string]any{"items": []item{{"queue": "jwt-set", "payload": 1}}}, 200, nil)
	if s, _ := wo.Do("GET", "/api/v1/pop/queue/jwt-set", nil); s != 403 {
		t.Errorf("write-only pop: %d", s)
	}
	if s, _ := wo.Do("GET", "/api/v1/resources/queues/jwt-set", nil); s != 403 {
		t.Errorf("write-only read: %d", s)
	}
	if s, _ := ro.Do("POST", "/api/v1/push", map[string]any{"items": []item{{"queue": "jwt-set", "payload": 2}}}); s != 403 {
		t.Errorf("read-only push: %d", s)
	}
	ro.JSON("GET", "/api/v1/resources/queues/jwt-set", nil, 200, nil)
}

// A JWKS rotation needs no restart: a token with a new kid is accepted once the JWKS publishes
// it (the unknown kid triggers a re-fetch), and the old kid is refused once the JWKS drops it
// (the periodic refresh).
func TestJWTJWKSRotation(t *testing.T) {
	t.Parallel()
	k1, k2 := jwtKey(0), jwtKey(1)
	idp := newJWKSEndpoint(t)
	idp.publish("2024-a", k1)
	c := startBroker(t, withJWT(func(j *auth.Config) {
		j.Algorithm, j.JWKSURL, j.JWKSRefresh, j.JWKSMinRefetch = "RS256", idp.URL, time.Second, 0
	}))
	as := func(key *rsa.PrivateKey, kid string) *servertest.Client {
		return c.WithHeader("Authorization", "Bearer "+testkit.SignJWT(t, jwt.SigningMethodRS256, key, kid, jwt.MapClaims{"role": "read-only"}))
	}
	expect := func(cl *servertest.Client, want int, msg string) {
		t.Helper()
		status, raw := cl.Do("GET", "/api/v1/resources/queues", nil)
		if status != want || (msg != "" && !bytes.Contains(raw, []byte(msg))) {
			t.Fatalf("status %d %s, want %d %s", status, raw, want, msg)
		}
	}
	expect(as(k1, "2024-a"), 200, "")
	expect(as(k2, "2024-b"), 401, `"Unknown key ID: 2024-b"`)

	idp.publish("2024-a", k1, "2024-b", k2) // rotation: the new key is published beside the old
	expect(as(k2, "2024-b"), 200, "")
	expect(as(k1, "2024-a"), 200, "")
	expect(as(k1, "2024-b"), 401, `"Invalid token signature"`)

	idp.publish("2024-b", k2) // the old key is retired
	testkit.WaitFor(t, 30*time.Second, "the periodic refresh to drop the retired kid", func() bool {
		status, raw := as(k1, "2024-a").Do("GET", "/api/v1/resources/queues", nil)
		if status != 200 && (status != 401 || !bytes.Contains(raw, []byte(`"Unknown key ID: 2024-a"`))) {
			t.Fatalf("retired kid: %d %s", status, raw)
		}
		return status == 401
	})
	expect(as(k2, "2024-b"), 200, "")
}

// The token's sub is stamped on every pushed message as producerSub, on every write path
// (push, transaction, the spool); a producerSub in the body is ignored.
func TestJWTProducerSub(t *testing.T) {
	t.Parallel()
	const secret = "producer-sub-test-secret-0123456789"
	c := startBroker(t, withJWT(func(j *auth.Config) { j.Secret = secret }), drainEvery(20*time.Millisecond))
	as := func(claims jwt.MapClaims) *servertest.Client {
		return c.WithHeader("Authorization", "Bearer "+testkit.SignJWT(t, jwt.SigningMethodHS256, []byte(secret), "", claims))
	}
	producer := as(jwt.MapClaims{"sub": "user-7", "role": "write-only"})
	consumer := as(jwt.MapClaims{"sub": "reader-1", "role": "read-write"})
	anonymous := as(jwt.MapClaims{"role": "read-write"})
	operator := as(jwt.MapClaims{"sub": "ops", "role": "admin"})

	// popOne long-polls, so that a message still in the spool is delivered once drained.
	popOne := func(queue string) message {
		t.Helper()
		var p popResponse
		consumer.JSON("GET", "/api/v1/pop/queue/"+queue+"?autoAck=true&wait=true&timeout=30000", nil, 200, &p)
		if len(p.Messages) != 1 {
			t.Fatalf("pop %s: %+v", queue, p)
		}
		return p.Messages[0]
	}
	sub := func(m message) string {
		if m.ProducerSub == nil {
			return "<null>"
		}
		return *m.ProducerSub
	}

	producer.JSON("POST", "/api/v1/push", map[string]any{"items": []item{
		{"queue": "jwt-sub-push", "payload": map[string]any{"n": 1}, "producerSub": "mallory"},
	}}, 200, nil)
	if got := sub(popOne("jwt-sub-push")); got != "user-7" {
		t.Errorf("push: producerSub %s, want user-7", got)
	}

	var tx struct {
		Success bool `json:"success"`
	}
	consumer.JSON("POST", "/api/v1/transaction", map[string]any{"operations": []map[string]any{
		{"type": "push", "items": []item{{"queue": "jwt-sub-tx", "payload": 1, "producerSub": "mallory"}}},
		{"type": "push", "queue": "jwt-sub-tx", "payload": 2, "producerSub": "mallory"},
	}}, 200, &tx)
	if !tx.Success {
		t.Fatal("transaction failed")
	}
	for range 2 {
		if got := sub(popOne("jwt-sub-tx")); got != "reader-1" {
			t.Errorf("transaction push: producerSub %s, want reader-1", got)
		}
	}

	anonymous.JSON("POST", "/api/v1/push", map[string]any{"items": []item{
		{"queue": "jwt-sub-none", "payload": 1, "producerSub": "mallory"},
	}}, 200, nil)
	if got := sub(popOne("jwt-sub-none")); got != "<null>" {
		t.Errorf("token without sub: producerSub %s, want null", got)
	}

	// Through the spool: push maintenance buffers the push, turning it off drains it.
	operator.JSON("POST", "/api/v1/system/maintenance", map[string]any{"enabled": true}, 200, nil)
	var res []pushResult
	producer.JSON("POST", "/api/v1/push", map[string]any{"items": []item{
		{"queue": "jwt-sub-spool", "payload": 1, "producerSub": "mallory"},
	}}, 201, &res)
	if res[0].Status != "buffered" {
		t.Fatalf("push during maintenance: %+v", res)
	}
	operator.JSON("POST", "/api/v1/system/maintenance", map[string]any{"enabled": false}, 200, nil)
	if got := sub(popOne("jwt-sub-spool")); got != "user-7" {
		t.Errorf("spooled push: producerSub %s, want user-7", got)
	}
}

// With JWT off the broker answers /auth/* as the standalone operator, and a producerSub in a
// body is still ignored.
func TestAuthRoutesWithJWTOff(t *testing.T) {
	t.Parallel()
	c := startBroker(t)
	var me struct {
		Standalone bool   `json:"standalone"`
		Role       string `json:"role"`
		Clusters   []struct {
			Name string `json:"name"`
		} `json:"clusters"`
		Views []string `json:"views"`
	}
	// A bogus token changes nothing: JWT off never reads the header.
	c.WithHeader("Authorization", "Bearer junk").JSON("GET", "/auth/me", nil, 200, &me)
	if !me.Standalone || me.Role != "admin" || len(me.Clusters) != 1 || me.Clusters[0].Name != "local" || !strings.Contains(strings.Join(me.Views, ","), "system") {
		t.Fatalf("/auth/me: %+v", me)
	}
	c.JSON("POST", "/auth/logout", nil, 200, nil)
	if status, raw := c.Do("GET", "/auth/login", nil); status != 200 || !bytes.Contains(raw, []byte("JWT_ENABLED=false")) {
		t.Fatalf("/auth/login: %d %s", status, raw)
	}
	push(t, c, item{"queue": "jwt-off", "payload": 1, "producerSub": "mallory"})
	if p := pop(t, c, "/api/v1/pop/queue/jwt-off"); len(p.Messages) != 1 || p.Messages[0].ProducerSub != nil {
		t.Fatalf("pop: %+v", p)
	}
}

// withJWT turns JWT on with the defaults JWT_ENABLED=true gives, changed by edit.
func withJWT(edit func(*auth.Config)) servertest.Option {
	return func(c *config.Config) {
		c.JWT = auth.Defaults()
		edit(&c.JWT)
	}
}

// The boot logs exactly one line about authentication: off, or on with the algorithms and
// the key source.
func TestJWTBootLogLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want []string
	}{
		{nil, []string{`msg="authentication is OFF`}},
		{map[string]string{"JWT_ENABLED": "true", "JWT_SECRET": "boot-log-secret-0123456789abcdef", "JWT_ALGORITHM": "auto"},
			[]string{`msg="JWT auth ENABLED`, `algorithms=HS256|HS384|HS512`, `key_source=JWT_SECRET`, `skip_paths=/health,/metrics/prometheus,/metrics,/`}},
	} {
		var buf testkit.LogBuffer
		cfg, err := config.Load(func(k string) string { return tc.env[k] })
		if err != nil {
			t.Fatal(err)
		}
		cfg.SpoolDir = t.TempDir()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		b, err := server.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(&buf, nil)), server.Options{ConnString: pgtest.NewDatabase(t), Listener: ln})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_ = b.Shutdown(ctx)
		cancel()
		var lines []string
		for _, l := range strings.Split(buf.String(), "\n") {
			if strings.Contains(l, "authentication is OFF") || strings.Contains(l, "JWT auth ENABLED") {
				lines = append(lines, l)
			}
		}
		if len(lines) != 1 {
			t.Fatalf("%d authentication lines, want 1:\n%s", len(lines), strings.Join(lines, "\n"))
		}
		for _, w := range tc.want {
			if !strings.Contains(lines[0], w) {
				t.Errorf("boot line %q lacks %q", lines[0], w)
			}
		}
	}
}

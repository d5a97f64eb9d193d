package http

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/valyala/fasthttp"

	"queen/auth"

	"queen/testkit"
)

const testSecret = "http-package-test-secret-0123456789"

func testVerifier(t *testing.T) *auth.Verifier {
	t.Helper()
	c := auth.Defaults()
	c.Secret = testSecret
	v, err := auth.New(context.Background(), c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v
}

func token(t *testing.T, claims jwt.MapClaims) string {
	return testkit.SignJWT(t, jwt.SigningMethodHS256, []byte(testSecret), "", claims)
}

// serve runs one request through the server's router.
func serve(s *Server, method, path, authorization string) *fasthttp.RequestCtx {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(path)
	if authorization != "" {
		ctx.Request.Header.Set("Authorization", authorization)
	}
	s.srv.Handler(&ctx)
	return &ctx
}

func errorOf(t *testing.T, ctx *fasthttp.RequestCtx) string {
	t.Helper()
	var b errorBody
	if err := json.Unmarshal(ctx.Response.Body(), &b); err != nil {
		t.Fatalf("not a JSON error body: %s", ctx.Response.Body())
	}
	return b.Error
}

func TestGuardOff(t *testing.T) {
	s := New(Deps{})
	ctx := serve(s, "GET", "/auth/me", "")
	var me standaloneIdentity
	if err := json.Unmarshal(ctx.Response.Body(), &me); err != nil || ctx.Response.StatusCode() != 200 ||
		!me.Standalone || me.Role != "admin" || len(me.Clusters) != 1 || me.Clusters[0].Name != "local" {
		t.Fatalf("/auth/me with JWT off: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	// An unknown non-GET route is the JSON 404, with or without a (bogus) token.
	for _, h := range []string{"", "Bearer junk"} {
		if ctx := serve(s, "POST", "/api/v1/nope", h); ctx.Response.StatusCode() != 404 {
			t.Fatalf("unknown route with JWT off: %d", ctx.Response.StatusCode())
		}
	}
	ran := false
	h := s.guard(auth.Admin, func(ctx *fasthttp.RequestCtx) { ran = producerSub(ctx) == "" })
	var c fasthttp.RequestCtx
	h(&c)
	if !ran {
		t.Fatal("JWT off must pass through with no producerSub")
	}
}

func TestGuardOn(t *testing.T) {
	s := New(Deps{Auth: testVerifier(t)})
	admin := "Bearer " + token(t, jwt.MapClaims{"role": "admin", "sub": "ops-1"})
	writer := "Bearer " + token(t, jwt.MapClaims{"role": "write-only", "sub": "user-7"})

	// Public routes and skip paths need nothing.
	if ctx := serve(s, "GET", "/", ""); ctx.Response.StatusCode() != 200 {
		t.Errorf("GET / : %d", ctx.Response.StatusCode())
	}
	if ctx := serve(s, "GET", "/auth/login", ""); ctx.Response.StatusCode() != 200 || !strings.Contains(string(ctx.Response.Body()), "queen_proxy") {
		t.Errorf("GET /auth/login: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	if ctx := serve(s, "POST", "/auth/logout", ""); ctx.Response.StatusCode() != 200 || !strings.Contains(string(ctx.Response.Body()), "proxy_required") {
		t.Errorf("POST /auth/logout: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	// /auth/me answers 401 itself without a token, and with a valid one says who it is and
	// which levels it passes (the dashboard disables the rest).
	ctx := serve(s, "GET", "/auth/me", "")
	var b authRequiredJSON
	_ = json.Unmarshal(ctx.Response.Body(), &b)
	if ctx.Response.StatusCode() != 401 || b.Code != "auth_required" {
		t.Errorf("/auth/me with JWT on, no token: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	ctx = serve(s, "GET", "/auth/me", admin)
	if got := string(ctx.Response.Body()); ctx.Response.StatusCode() != 200 ||
		!strings.Contains(got, `"levels":["read-only","write-only","read-write","admin"]`) {
		t.Errorf("/auth/me with JWT on, admin token: %d %s", ctx.Response.StatusCode(), got)
	}
	// Unknown paths are read-write: SPA deep links need a token too.
	ctx = serve(s, "GET", "/queues/orders", "")
	if ctx.Response.StatusCode() != 401 || errorOf(t, ctx) != "Authentication required" ||
		string(ctx.Response.Header.Peek("WWW-Authenticate")) == "" {
		t.Errorf("unknown path without a token: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	if ctx := serve(s, "GET", "/queues/orders", writer); ctx.Response.StatusCode() != 403 || errorOf(t, ctx) != "Insufficient permissions" {
		t.Errorf("unknown path with a write-only token: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	if ctx := serve(s, "GET", "/queues/orders", admin); ctx.Response.StatusCode() != 200 {
		t.Errorf("unknown path with an admin token: %d", ctx.Response.StatusCode())
	}
	// An encoded path is matched and skip-checked as sent: /%68ealth is not /health.
	if ctx := serve(s, "GET", "/%68ealth", ""); ctx.Response.StatusCode() != 401 {
		t.Errorf("/%%68ealth: %d", ctx.Response.StatusCode())
	}

	// The sub reaches the handler.
	var got string
	h := s.guard(auth.WriteOnly, func(ctx *fasthttp.RequestCtx) { got = producerSub(ctx) })
	var c fasthttp.RequestCtx
	c.Request.SetRequestURI("/api/v1/push")
	c.Request.Header.Set("Authorization", writer)
	h(&c)
	if got != "user-7" {
		t.Fatalf("producerSub = %q, want user-7", got)
	}
}

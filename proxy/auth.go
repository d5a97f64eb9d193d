package proxy

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"queen/proxy/pxdb"
)

// Credentials (docs/proxy.md, "Credentials"): an API key sent as a bearer token, bound to one
// cell and a set of classes; or a human session, the cookie a sign-in sets, bound to the user's
// cell and role.

// caller is who a request comes from, as the audit records it.
type caller struct {
	name       string // "key:<id>" or the user's name
	credential string // "api_key:<id>" or "session"
	key        *pxdb.Key
}

// authenticate resolves the request's credential and checks it against the cell and the
// route's class. It answers the refusal itself and reports false.
func (p *Proxy) authenticate(ctx *fasthttp.RequestCtx, c *cell, rt route) (caller, bool) {
	if auth := ctx.Request.Header.Peek("Authorization"); len(auth) > 0 {
		return p.authenticateKey(ctx, c, rt, string(auth))
	}
	if cookie := ctx.Request.Header.Cookie(sessionCookie); len(cookie) > 0 {
		return p.authenticateSession(ctx, c, rt, string(cookie))
	}
	if rt.dashboard() && p.cfg.JWTSecret != "" {
		// A person opening the dashboard: to the sign-in page, and back after it.
		ctx.Redirect("/proxy/login?next="+url.QueryEscape(rt.path), fasthttp.StatusFound)
		return caller{}, false
	}
	if rt.pattern == "/auth/me" && p.cfg.JWTSecret != "" {
		// The dashboard asking who it is (after signing out, say): it goes to the sign-in page.
		writeJSON(ctx, fasthttp.StatusUnauthorized, struct {
			answer
			Login string `json:"login"`
		}{answer{Code: "unauthenticated", Error: "sign in first"}, "/proxy/login"})
		return caller{}, false
	}
	ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="queen-proxy"`)
	writeJSON(ctx, fasthttp.StatusUnauthorized, answer{Code: "unauthenticated", Error: "an API key (Authorization: Bearer) or a session is required"})
	return caller{}, false
}

// dashboard reports whether the route is the dashboard's shell.
func (r route) dashboard() bool {
	return r.pattern == "/" || r.pattern == "/assets/{file:*}" || r.pattern == "/favicon.ico"
}

func (p *Proxy) authenticateKey(ctx *fasthttp.RequestCtx, c *cell, rt route, auth string) (caller, bool) {
	secret, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || !strings.HasPrefix(secret, pxdb.KeyPrefix) {
		return refuse(ctx, fasthttp.StatusUnauthorized, "invalid_credential", "the bearer token is not an API key of this proxy")
	}
	key, err := p.keys.get(sha256.Sum256([]byte(secret)), func() (pxdb.Key, error) {
		ctx, cancel := lookupContext()
		defer cancel()
		return p.store.KeyBySecret(ctx, secret)
	})
	switch {
	case errors.Is(err, pxdb.ErrNotFound):
		return refuse(ctx, fasthttp.StatusUnauthorized, "invalid_credential", "unknown API key")
	case err != nil:
		p.log.Error("cannot look up an API key", "err", err)
		return refuse(ctx, fasthttp.StatusServiceUnavailable, "control_plane_unavailable", "credentials cannot be checked now")
	case key.RevokedAt != nil:
		return refuse(ctx, fasthttp.StatusUnauthorized, "credential_revoked", "this API key was revoked")
	case !time.Now().Before(key.ExpiresAt):
		return refuse(ctx, fasthttp.StatusUnauthorized, "credential_expired", "this API key has expired")
	case key.Cell != c.Name:
		return refuse(ctx, fasthttp.StatusForbidden, "wrong_cell", "this API key belongs to another cell")
	case !grants(key.Classes, rt.class):
		return refuse(ctx, fasthttp.StatusForbidden, "class_not_granted", "this API key is not granted "+string(rt.class))
	}
	id := key.ID.String()
	return caller{name: "key:" + id, credential: "api_key:" + id, key: &key}, true
}

func (p *Proxy) authenticateSession(ctx *fasthttp.RequestCtx, c *cell, rt route, token string) (caller, bool) {
	s, err := p.liveSession(token)
	switch {
	case errors.Is(err, errNoSession):
		clearSession(ctx, p.cfg.TLS())
		if rt.dashboard() {
			ctx.Redirect("/proxy/login?next="+url.QueryEscape(rt.path), fasthttp.StatusFound)
			return caller{}, false
		}
		return refuse(ctx, fasthttp.StatusUnauthorized, "session_expired", "the session is not valid; sign in again")
	case err != nil:
		p.log.Error("cannot look up a session", "err", err)
		return refuse(ctx, fasthttp.StatusServiceUnavailable, "control_plane_unavailable", "credentials cannot be checked now")
	}
	u := s.User
	if u.Cell != c.Name {
		return refuse(ctx, fasthttp.StatusForbidden, "wrong_cell", "this session belongs to another cell")
	}
	if classes, ok := pxdb.RoleClasses(u.Role); !ok || !grants(classes, rt.class) {
		return refuse(ctx, fasthttp.StatusForbidden, "class_not_granted", "the role "+u.Role+" is not granted "+string(rt.class))
	}
	if !ctx.IsGet() && !ctx.IsHead() && !sameOrigin(ctx) {
		return refuse(ctx, fasthttp.StatusForbidden, "csrf_refused", "a request changing state with a session cookie must come from this origin")
	}
	return caller{name: u.Name, credential: "session"}, true
}

// sameOrigin is the CSRF check of requests made with the session cookie: the browser's Origin
// (or, without it, Referer) must be this host. SameSite=Strict already keeps the cookie off
// cross-site requests; this check also holds for browsers and paths where it does not.
func sameOrigin(ctx *fasthttp.RequestCtx) bool {
	from := string(ctx.Request.Header.Peek("Origin"))
	if from == "" || from == "null" {
		from = string(ctx.Request.Header.Referer())
	}
	u, err := url.Parse(from)
	if err != nil || u.Host == "" {
		return false
	}
	scheme := map[bool]string{true: "https", false: "http"}[ctx.IsTLS()]
	return u.Scheme == scheme && strings.EqualFold(u.Host, string(ctx.Host()))
}

func refuse(ctx *fasthttp.RequestCtx, status int, code, msg string) (caller, bool) {
	writeJSON(ctx, status, answer{Code: code, Error: msg})
	return caller{}, false
}

// lookupTimeout bounds a credential check against the control-plane database.
const lookupTimeout = 5 * time.Second

func lookupContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), lookupTimeout)
}

package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"queen/auth"
	"queen/proxy/pxdb"
)

// Human sessions: a sign-in with a user's password records a session in the control plane and
// sets a short-lived HS256 token naming it, signed with QUEEN_PROXY_JWT_SECRET, in an HttpOnly,
// SameSite=Strict cookie (Secure under TLS). Each request checks the signature, then that the
// session is still live (feedCache: from memory while the change feed runs), so a sign-out, a
// disabled or deleted user ends the session on every proxy, and the user's cell and role are
// those of now. Sign-ins are throttled per user name and per address across proxies
// (signInLimits).

const sessionCookie = "queen_session"

// sessionClaims is what a session token holds.
type sessionClaims struct {
	Cell string `json:"cell"`
	Role string `json:"role"`
	jwt.RegisteredClaims
}

const sessionIssuer = "queen-proxy"

func (p *Proxy) signSession(s pxdb.Session) (string, error) {
	u := s.User
	return jwt.NewWithClaims(jwt.SigningMethodHS256, sessionClaims{Cell: u.Cell, Role: u.Role, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: sessionIssuer, Subject: u.Name, ID: s.ID.String(),
		IssuedAt: jwt.NewNumericDate(time.Now()), ExpiresAt: jwt.NewNumericDate(s.ExpiresAt),
	}}).SignedString([]byte(p.cfg.JWTSecret))
}

// sessionLookup is what the session cache keeps: an ended session is remembered as such.
type sessionLookup struct {
	session pxdb.Session
	live    bool
}

// errNoSession is a token that is not a valid signed token, or names a session that has ended.
var errNoSession = errors.New("no live session")

// liveSession checks the token's signature, then that the session it names is live.
func (p *Proxy) liveSession(token string) (pxdb.Session, error) {
	claims, err := p.verifySession(token)
	if err != nil {
		return pxdb.Session{}, errNoSession
	}
	id, err := uuid.Parse(claims.ID)
	if err != nil {
		return pxdb.Session{}, errNoSession // a token of a release whose sessions were not recorded
	}
	found, err := p.sessions.get(id, func() (sessionLookup, error) {
		ctx, cancel := lookupContext()
		defer cancel()
		s, err := p.store.LiveSession(ctx, id)
		if errors.Is(err, pxdb.ErrNotFound) {
			return sessionLookup{}, nil
		}
		return sessionLookup{session: s, live: err == nil}, err
	})
	switch {
	case err != nil:
		return pxdb.Session{}, err
	case !found.live || !time.Now().Before(found.session.ExpiresAt):
		return pxdb.Session{}, errNoSession
	}
	return found.session, nil
}

func (p *Proxy) verifySession(token string) (*sessionClaims, error) {
	if p.cfg.JWTSecret == "" {
		return nil, errors.New("sessions are off")
	}
	var c sessionClaims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return []byte(p.cfg.JWTSecret), nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer(sessionIssuer), jwt.WithExpirationRequired())
	if err != nil {
		return nil, err
	}
	return &c, nil
}

func setSession(ctx *fasthttp.RequestCtx, token string, ttl time.Duration, secure bool) {
	var c fasthttp.Cookie
	c.SetKey(sessionCookie)
	c.SetValue(token)
	c.SetPath("/")
	c.SetHTTPOnly(true)
	c.SetSecure(secure)
	c.SetSameSite(fasthttp.CookieSameSiteStrictMode)
	c.SetMaxAge(int(ttl.Seconds()))
	ctx.Response.Header.SetCookie(&c)
}

func clearSession(ctx *fasthttp.RequestCtx, secure bool) {
	var c fasthttp.Cookie
	c.SetKey(sessionCookie)
	c.SetPath("/")
	c.SetHTTPOnly(true)
	c.SetSecure(secure)
	c.SetSameSite(fasthttp.CookieSameSiteStrictMode)
	c.SetExpire(fasthttp.CookieExpireDelete)
	ctx.Response.Header.SetCookie(&c)
}

// ownRoute answers the proxy's own paths: /healthz, the sign-in page and routes, and the
// broker's dashboard identity routes that the session replaces. It reports whether it did.
func (p *Proxy) ownRoute(ctx *fasthttp.RequestCtx, method, path, id string) bool {
	switch {
	case path == "/healthz" && method == "GET":
		set := p.cells.Load()
		writeJSON(ctx, fasthttp.StatusOK, map[string]any{"status": "ok", "tls": p.cfg.TLS(), "enforce": p.cfg.Enforce,
			"tenant_header": p.cfg.TenantHeader, "cells": len(set.byName), "sessions": p.cfg.JWTSecret != ""})
	case path == "/proxy/login" && method == "GET", path == "/auth/login" && method == "GET":
		p.loginPage(ctx, "")
	case path == "/proxy/login" && method == "POST":
		p.login(ctx, id)
	case path == "/proxy/metrics" && method == "GET":
		p.metrics.serve(ctx)
	case (path == "/proxy/logout" || path == "/auth/logout") && method == "POST":
		p.logout(ctx, id)
	case (path == "/proxy/me" || path == "/auth/me") && method == "GET" && len(ctx.Request.Header.Cookie(sessionCookie)) > 0:
		// The dashboard boots from /auth/me: for a session the proxy answers it, with the
		// broker access levels the user's role amounts to, so the dashboard offers what the
		// proxy will let through. With an API key it is forwarded like any read.
		s, err := p.liveSession(string(ctx.Request.Header.Cookie(sessionCookie)))
		switch {
		case errors.Is(err, errNoSession):
			clearSession(ctx, p.cfg.TLS())
			writeJSON(ctx, fasthttp.StatusUnauthorized, answer{Code: "session_expired", Error: "the session is not valid; sign in again"})
			return true
		case err != nil:
			p.log.Error("cannot look up a session", "request_id", id, "err", err)
			writeJSON(ctx, fasthttp.StatusServiceUnavailable, answer{Code: "control_plane_unavailable", Error: "credentials cannot be checked now"})
			return true
		}
		u := s.User
		writeJSON(ctx, fasthttp.StatusOK, auth.Me{Authenticated: true, AuthMode: "jwt", Subject: u.Name,
			Username: u.Name, Cell: u.Cell, Role: u.Role, Levels: roleLevels(u.Role), ExpiresAt: &s.ExpiresAt})
	default:
		return false
	}
	return true
}

// roleLevels are the broker access levels (docs/security.md) a user role's classes amount to,
// for the dashboard: reading is read-only, producing write-only, consuming read-write, queue
// administration and operating the cell admin.
func roleLevels(role string) []string {
	classes, _ := pxdb.RoleClasses(role)
	of := map[auth.Level]Class{auth.ReadOnly: Read, auth.WriteOnly: Produce, auth.ReadWrite: Consume, auth.Admin: QueueAdmin}
	return auth.LevelsPassed(func(l auth.Level) bool { return grants(classes, of[l]) })
}

// login checks a user's password (a JSON body {username,password} or the sign-in form) and
// sets the session. Every attempt is audited, refused ones too.
func (p *Proxy) login(ctx *fasthttp.RequestCtx, id string) {
	if p.cfg.JWTSecret == "" {
		writeJSON(ctx, fasthttp.StatusServiceUnavailable, answer{Code: "sessions_off", Error: "sign-in needs QUEEN_PROXY_JWT_SECRET; this proxy takes API keys only"})
		return
	}
	form := !strings.HasPrefix(string(ctx.Request.Header.ContentType()), "application/json")
	// A browser's sign-in comes from the proxy's own page: a form posted from another site
	// would sign the visitor in as someone else (login CSRF).
	if len(ctx.Request.Header.Peek("Origin")) > 0 && !sameOrigin(ctx) {
		writeJSON(ctx, fasthttp.StatusForbidden, answer{Code: "csrf_refused", Error: "sign in from this proxy's own page"})
		return
	}
	var in struct{ Username, Password, Next string }
	if form {
		args := ctx.PostArgs()
		in.Username, in.Password, in.Next = string(args.Peek("username")), string(args.Peek("password")), string(args.Peek("next"))
	} else if err := json.Unmarshal(ctx.PostBody(), &in); err != nil {
		writeJSON(ctx, fasthttp.StatusBadRequest, answer{Code: "bad_request", Error: "body must be {\"username\",\"password\"}"})
		return
	}
	if in.Username == "" || in.Password == "" || len(in.Username) > 255 || len(in.Password) > 1024 {
		writeJSON(ctx, fasthttp.StatusBadRequest, answer{Code: "bad_request", Error: "username and password are required"})
		return
	}
	c, cancel := lookupContext()
	defer cancel()
	op := pxdb.Operation{Who: in.Username, Credential: "password", Method: "POST", Path: "/proxy/login", Class: "sign_in", RequestID: id}
	address := clientIP(ctx)
	wait, err := p.store.SignInBlocked(c, in.Username, address, signInLimits)
	if err == nil && wait > 0 {
		// Refused before the password is checked: throttled attempts cost no hash.
		p.metrics.signIn("throttled")
		op.Status = fasthttp.StatusTooManyRequests
		p.audit(op)
		p.log.Warn("sign-in throttled", "user", in.Username, "address", address, "retry_after_s", int(wait.Seconds())+1, "request_id", id)
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
		writeJSON(ctx, fasthttp.StatusTooManyRequests, answer{Code: "sign_in_throttled", Error: "too many failed sign-ins for this user or from this address; try again later"})
		return
	}
	var u pxdb.User
	if err == nil {
		u, err = p.store.CheckPassword(c, in.Username, in.Password)
	}
	switch {
	case errors.Is(err, pxdb.ErrBadCredentials):
		p.metrics.signIn("bad_credentials")
		if err := p.store.SignInFailed(c, in.Username, address, signInLimits); err != nil {
			p.log.Error("cannot count a failed sign-in", "request_id", id, "err", err)
		}
		op.Status = fasthttp.StatusUnauthorized
		p.audit(op)
		if form {
			ctx.SetStatusCode(fasthttp.StatusUnauthorized)
			p.loginPage(ctx, "Wrong user name or password.")
			return
		}
		writeJSON(ctx, fasthttp.StatusUnauthorized, answer{Code: "bad_credentials", Error: "wrong user name or password"})
		return
	case err != nil:
		p.metrics.signIn("error")
		p.log.Error("cannot check a password", "request_id", id, "err", err)
		writeJSON(ctx, fasthttp.StatusServiceUnavailable, answer{Code: "control_plane_unavailable", Error: "sign-in is not possible now"})
		return
	}
	if err := p.store.SignInSucceeded(c, u.Name); err != nil {
		p.log.Warn("cannot clear the failed sign-ins of a user", "user", u.Name, "request_id", id, "err", err)
	}
	session, err := p.store.CreateSession(c, u, p.cfg.SessionTTL, address)
	if err != nil {
		p.metrics.signIn("error")
		p.log.Error("cannot record a session", "request_id", id, "err", err)
		writeJSON(ctx, fasthttp.StatusServiceUnavailable, answer{Code: "control_plane_unavailable", Error: "sign-in is not possible now"})
		return
	}
	p.metrics.signIn("ok")
	token, err := p.signSession(session)
	if err != nil {
		p.log.Error("cannot sign a session", "request_id", id, "err", err)
		writeJSON(ctx, fasthttp.StatusInternalServerError, answer{Code: "internal", Error: "cannot sign the session"})
		return
	}
	op.Cell, op.Status = u.Cell, fasthttp.StatusOK
	p.audit(op)
	setSession(ctx, token, p.cfg.SessionTTL, p.cfg.TLS())
	if form {
		ctx.Redirect(safeNext(in.Next), fasthttp.StatusSeeOther)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"success": true, "user": map[string]string{"username": u.Name, "role": u.Role, "cell": u.Cell}})
}

// signInLimits throttle sign-ins across every proxy of the control plane: five failures for
// one user name, or twenty from one address, refuse further attempts (429) until fifteen
// minutes after the first failure of the window. A success clears the user's count.
var signInLimits = pxdb.SignInLimits{PerUser: 5, PerAddress: 20, Window: 15 * time.Minute}

// logout ends the session the cookie names, on every proxy, and drops the cookie.
func (p *Proxy) logout(ctx *fasthttp.RequestCtx, id string) {
	if claims, err := p.verifySession(string(ctx.Request.Header.Cookie(sessionCookie))); err == nil {
		if sid, err := uuid.Parse(claims.ID); err == nil {
			c, cancel := lookupContext()
			defer cancel()
			if err := p.store.EndSession(c, sid); err != nil {
				p.log.Error("cannot end a session", "request_id", id, "err", err)
				writeJSON(ctx, fasthttp.StatusServiceUnavailable, answer{Code: "control_plane_unavailable", Error: "sign-out is not possible now; the session stays valid"})
				return
			}
		}
	}
	clearSession(ctx, p.cfg.TLS())
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"success": true})
}

// safeNext keeps a redirect after sign-in on this host: a path, never a URL or "//host".
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/"
	}
	if u, err := url.Parse(next); err != nil || u.Host != "" || u.Scheme != "" {
		return "/"
	}
	return next
}

// loginPage is the sign-in form: one page, no script, nothing loaded from elsewhere.
func (p *Proxy) loginPage(ctx *fasthttp.RequestCtx, problem string) {
	next := safeNext(string(ctx.QueryArgs().Peek("next")))
	msg := ""
	if problem != "" {
		msg = `<p role="alert">` + html.EscapeString(problem) + `</p>`
	}
	if p.cfg.JWTSecret == "" {
		msg = `<p role="alert">Sign-in is off on this proxy (QUEEN_PROXY_JWT_SECRET is not set).</p>`
	}
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.Response.Header.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	ctx.Response.Header.Set("X-Frame-Options", "DENY")
	fmt.Fprintf(ctx, loginHTML, msg, html.EscapeString(next))
}

const loginHTML = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in · Queen</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font:16px system-ui,sans-serif;display:grid;place-items:center;min-height:90vh;margin:0}
form{display:grid;gap:.6em;min-width:18em}input,button{font:inherit;padding:.4em}p[role=alert]{color:#b00020}</style>
</head><body><form method="post" action="/proxy/login"><h1>Queen</h1>%s
<label>User name <input name="username" autocomplete="username" required autofocus></label>
<label>Password <input name="password" type="password" autocomplete="current-password" required></label>
<input type="hidden" name="next" value="%s"><button type="submit">Sign in</button></form></body></html>
`

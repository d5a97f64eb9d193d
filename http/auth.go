package http

import (
	"github.com/valyala/fasthttp"

	"queen/auth"
)

// subjectKey is the user value under which guard leaves the token's sub claim.
const subjectKey = "queen.jwt.sub"

// guard enforces a route's access level. With JWT off it is the handler itself (a transparent
// pass-through). With JWT on: a path in JWT_SKIP_PATHS and a public route pass untouched;
// anything else needs a bearer token whose roles pass the level (401 without a valid token,
// 403 when the roles do not pass), and the token's sub is left for the push handlers.
func (s *Server) guard(level auth.Level, h fasthttp.RequestHandler) fasthttp.RequestHandler {
	v := s.Auth
	if v == nil {
		return h
	}
	return func(ctx *fasthttp.RequestCtx) {
		// The router matched the original (undecoded) path, so the skip list sees the same
		// string: a path cannot be skipped under one spelling and routed under another.
		if level == auth.Public || v.Skip(string(ctx.Request.URI().PathOriginal())) {
			h(ctx)
			return
		}
		id, err := v.Authorize(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization), level)
		if err != nil {
			if err.Status == fasthttp.StatusUnauthorized {
				ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, `Bearer realm="queen"`)
			}
			writeJSON(ctx, err.Status, errorBody{Error: err.Message})
			return
		}
		if id.Subject != "" {
			ctx.SetUserValue(subjectKey, id.Subject)
		}
		h(ctx)
	}
}

// producerSub is the sub claim of the request's token, stamped on every message it pushes.
// "" (stored as null) without a token (JWT off, a skipped path, a token without sub): a
// producerSub sent in a body is never used.
func producerSub(ctx *fasthttp.RequestCtx) string {
	sub, _ := ctx.UserValue(subjectKey).(string)
	return sub
}

// standaloneIdentity is what /auth/me answers with JWT off: the dashboard's operator identity
// when it talks to the broker directly, every level passed. With it come the reference's
// fields: one synthetic cluster, admin, every view; standalone hides the cluster selector and
// sign-out.
type standaloneIdentity struct {
	auth.Me
	Standalone bool              `json:"standalone"`
	User       standaloneUser    `json:"user"`
	Clusters   []standaloneGroup `json:"clusters"`
	Views      []string          `json:"views"`
}

type standaloneUser struct {
	ID       string `json:"id"`
	Username string `json:"username"`
	Role     string `json:"role"`
	Operator bool   `json:"operator"`
}

type standaloneGroup struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Role string `json:"role"`
	URL  string `json:"url"`
}

var standaloneViews = []string{
	"dashboard", "operations", "queues", "ephemeral", "consumers", "messages", "kv", "timers",
	"traces", "analytics", "workload", "dlq", "system",
}

// authRequiredJSON is /auth/me's answer with JWT on.
type authRequiredJSON struct {
	Error   string `json:"error"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

const proxyNote = "this broker verifies JWT bearer tokens and holds no accounts or sessions; " +
	"sign-in to the dashboard needs queen_proxy (or another gateway that holds sessions) in front of it"

// authMe serves GET /auth/me.
func (s *Server) authMe(ctx *fasthttp.RequestCtx) error {
	if s.Auth != nil {
		// Authorize against the strictest level: a valid token that is not admin comes back
		// with ErrForbidden and its identity.
		if h := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization); len(h) > 0 {
			id, err := s.Auth.Authorize(h, auth.Admin)
			if err == nil || err == auth.ErrForbidden {
				// With JWT on, /auth/me names the token's subject and levels (an addition to
				// the reference, docs/compat.md).
				writeJSON(ctx, fasthttp.StatusOK, auth.Me{Authenticated: true, AuthMode: "jwt", Subject: id.Subject,
					Levels: auth.LevelsPassed(func(l auth.Level) bool { return auth.Allowed(l, id.Roles) })})
				return nil
			}
		}
		writeJSON(ctx, fasthttp.StatusUnauthorized, authRequiredJSON{
			Error: "Authentication required", Code: "auth_required", Message: proxyNote,
		})
		return nil
	}
	writeJSON(ctx, fasthttp.StatusOK, standaloneIdentity{
		Me: auth.Me{Authenticated: true, AuthMode: "none", Role: "admin",
			Levels: auth.LevelsPassed(func(auth.Level) bool { return true })},
		Standalone: true,
		User:       standaloneUser{ID: "standalone", Username: "operator", Role: "admin", Operator: true},
		Clusters:   []standaloneGroup{{ID: "local", Name: "local", Role: "admin", URL: "/"}},
		Views:      standaloneViews,
	})
	return nil
}

// authLogin serves GET /auth/login: a page that says how sign-in works here.
func (s *Server) authLogin(ctx *fasthttp.RequestCtx) error {
	body := loginPageOff
	if s.Auth != nil {
		body = loginPageJWT
	}
	ctx.Response.Header.Set("Cache-Control", "no-cache, no-store, must-revalidate")
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetBodyString(body)
	return nil
}

// authLogout serves POST /auth/logout: there is no session to end either way.
func (s *Server) authLogout(ctx *fasthttp.RequestCtx) error {
	if s.Auth != nil {
		writeJSON(ctx, fasthttp.StatusOK, map[string]any{"success": true, "code": "proxy_required", "message": proxyNote})
		return nil
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"success": true, "standalone": true})
	return nil
}

const loginPageOff = `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Queen broker: sign-in</title></head>
<body>
<h1>No sign-in needed</h1>
<p>Authentication is off on this broker (JWT_ENABLED=false): the <a href="/">dashboard</a> and the
API are open to anyone who can reach this port.</p>
</body>
</html>
`

const loginPageJWT = `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Queen broker: sign-in</title></head>
<body>
<h1>Sign-in is not served by the broker</h1>
<p>This broker verifies JWT bearer tokens (JWT_ENABLED=true) and holds no accounts or sessions,
so the dashboard cannot sign you in here. Put queen_proxy (or another gateway that holds
sessions and forwards a bearer token) in front of the broker to use the dashboard. API clients
send <code>Authorization: Bearer &lt;token&gt;</code>.</p>
</body>
</html>
`

package http

// Browsers. The broker sends no CORS headers unless the operator lists the origins that may
// call it from a browser (QUEEN_CORS_ALLOWED_ORIGINS), and it refuses a request that a browser
// sent from any other origin: with JWT off, a page on another site must not be able to pop
// messages or flip maintenance through an operator's browser. Clients that are not browsers
// send neither Origin nor Sec-Fetch-Site and are not affected; the dashboard, served by the
// broker itself, is same-origin.

import (
	"net/url"
	"slices"

	"github.com/valyala/fasthttp"
)

// crossOrigin reports whether a browser sent the request from another origin: its Origin names
// another host than the one it addressed, or its Sec-Fetch-Site says so.
func crossOrigin(ctx *fasthttp.RequestCtx) (origin string, cross bool) {
	origin = string(ctx.Request.Header.Peek("Origin"))
	switch string(ctx.Request.Header.Peek("Sec-Fetch-Site")) {
	case "cross-site", "same-site":
		return origin, true
	}
	if origin == "" {
		return "", false
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return origin, true // "null" (a sandboxed page or a file) or garbage
	}
	return origin, u.Host != string(ctx.Host())
}

// originAllowed applies the allow-list. An allowed cross-origin request gets the CORS headers;
// a refused one is answered 403 here.
func (s *Server) originAllowed(ctx *fasthttp.RequestCtx) bool {
	origin, cross := crossOrigin(ctx)
	if !cross {
		return true
	}
	if origin != "" && (slices.Contains(s.Config.CORSOrigins, origin) || slices.Contains(s.Config.CORSOrigins, "*")) {
		h := &ctx.Response.Header
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Content-Type, Authorization")
		return true
	}
	writeJSON(ctx, fasthttp.StatusForbidden, errorBody{
		Error: "cross-origin browser request refused: its origin is not in QUEEN_CORS_ALLOWED_ORIGINS",
		Code:  "origin_not_allowed",
	})
	return false
}

// preflight answers a CORS preflight of an allowed origin (originAllowed ran before it).
func preflight(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set("Access-Control-Max-Age", "86400")
	ctx.SetStatusCode(fasthttp.StatusNoContent)
}

package http

// Tenancy (QUEEN_TENANCY_HEADER, see docs/security.md): the x-queen-tenant header names the
// caller's tenant, resolved once per request (tenanted). Handlers take it as a persistence.Scope
// (s.scope), make the queue names they receive that tenant's persistence.QueueName with
// queueName, and show a queue as its Name; listings pass the scope to persistence. With
// tenancy off every request is the default tenant ("") and the header is never read.

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"queen/persistence"
)

// TenantHeader names the caller's tenant when QUEEN_TENANCY_HEADER=true.
const TenantHeader = "x-queen-tenant"

// tenantShape is what a tenant id looks like: validated for shape only, never looked up.
var tenantShape = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

type tenantKey struct{}

// tenanted resolves the request's tenant once, before h runs: absent header (or tenancy off)
// is the default tenant, a malformed one a 400.
func (s *Server) tenanted(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	if !s.Config.TenancyHeader {
		return h
	}
	return func(ctx *fasthttp.RequestCtx) {
		v := strings.TrimSpace(string(ctx.Request.Header.Peek(TenantHeader)))
		if v != "" {
			if !tenantShape.MatchString(v) {
				writeJSON(ctx, fasthttp.StatusBadRequest, errorBody{Error: "invalid " + TenantHeader + " header"})
				return
			}
			ctx.SetUserValue(tenantKey{}, v)
		}
		h(ctx)
	}
}

// scope is the request's tenant, as persistence keeps listings and checks to it.
func (s *Server) scope(ctx *fasthttp.RequestCtx) persistence.Scope {
	t, _ := ctx.UserValue(tenantKey{}).(string)
	return persistence.Scope{Tenant: t}
}

// queueName is the queue of scope that a name the caller sent designates. A name containing
// U+001F is refused whether tenancy is on or not: stored, it would address another tenant's
// queue.
func queueName(scope persistence.Scope, name, field string) (persistence.QueueName, error) {
	if strings.Contains(name, persistence.TenantSep) {
		return persistence.QueueName{}, badf(field + ` must not contain the character \u001f`)
	}
	t := scope.Tenant
	if t == "" {
		return scope.Queue(name), checkLen(name, field)
	}
	// The stored name is at most maxName characters, tenant included.
	if room := maxName - len(t) - 1; utf8.RuneCountInString(name) > room {
		return persistence.QueueName{}, badf(fmt.Sprintf("%s must be at most %d characters for tenant %s", field, room, t))
	}
	return scope.Queue(name), nil
}

package http

// Tenancy (QUEEN_TENANCY_HEADER, see docs/security.md): the x-queen-tenant header names the
// caller's tenant, and a tenant's queue is stored under persistence.InternalName(tenant, name).
// Every handler maps the queue names it receives with s.queueName and shows stored names with
// shownName; listings pass s.scope to persistence. With tenancy off every request is the
// default tenant ("") and the header is never read.

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

// tenant is the request's tenant, "" for the default tenant.
func (s *Server) tenant(ctx *fasthttp.RequestCtx) string {
	t, _ := ctx.UserValue(tenantKey{}).(string)
	return t
}

// scope is the persistence scope of the request's listings.
func (s *Server) scope(ctx *fasthttp.RequestCtx) string {
	return persistence.ScopePrefix(s.tenant(ctx))
}

// queueName maps a queue name the caller sent to its stored name. A name containing U+001F is
// refused whether tenancy is on or not: it could address another tenant's queue.
func (s *Server) queueName(ctx *fasthttp.RequestCtx, name, field string) (string, error) {
	if strings.Contains(name, persistence.TenantSep) {
		return "", badf(field + ` must not contain the character \u001f`)
	}
	t := s.tenant(ctx)
	if t == "" {
		return name, checkLen(name, field)
	}
	// The stored name is at most maxName characters, tenant included.
	if room := maxName - len(t) - 1; utf8.RuneCountInString(name) > room {
		return "", badf(fmt.Sprintf("%s must be at most %d characters for tenant %s", field, room, t))
	}
	return persistence.InternalName(t, name), nil
}

// owns says whether the stored queue name belongs to the request's tenant.
func (s *Server) owns(ctx *fasthttp.RequestCtx, stored string) bool {
	t, _ := persistence.SplitName(stored)
	return t == s.tenant(ctx)
}

// shownName is the name a stored queue name is shown as: without its tenant.
func shownName(stored string) string {
	_, n := persistence.SplitName(stored)
	return n
}

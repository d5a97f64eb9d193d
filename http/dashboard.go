package http

import (
	_ "embed"

	"github.com/valyala/fasthttp"
)

//go:embed dashboard/index.html
var dashboardIndex []byte

// serveDashboard answers with the dashboard shell; client-side routes resolve in the browser.
func serveDashboard(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set("Cache-Control", "no-cache, no-store, must-revalidate")
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.SetBody(dashboardIndex)
}

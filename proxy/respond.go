package proxy

import (
	"errors"

	"queen/httpkit"

	"github.com/valyala/fasthttp"
)

// answer is the body of every answer the proxy writes itself.
type answer struct {
	Code  string `json:"code"`
	Error string `json:"error"`
}

// writeJSON answers v, one of the proxy's own answers (which always encode).
func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) { _ = httpkit.JSON(ctx, status, v) }

// requestError answers requests fasthttp could not read: 413 over QUEEN_PROXY_MAX_BODY_BYTES,
// before anything is forwarded; a fixed 400 otherwise (fasthttp's text quotes the request).
func requestError(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		writeJSON(ctx, fasthttp.StatusRequestEntityTooLarge, answer{Code: "body_too_large", Error: "request body exceeds QUEEN_PROXY_MAX_BODY_BYTES"})
		return
	}
	writeJSON(ctx, fasthttp.StatusBadRequest, answer{Code: "bad_request", Error: "malformed HTTP request"})
}

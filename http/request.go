package http

import (
	"log/slog"
	"runtime/debug"

	"queen/httpkit"

	"github.com/valyala/fasthttp"
)

// RequestIDHeader carries the id of every request back to the client: an operator finds the
// log lines of a failed request by it, and an internal error's answer names it.
const RequestIDHeader = "X-Request-Id"

type requestIDKey struct{}
type loggerKey struct{}

// keptBodyBytes is the largest request body whose buffer a connection keeps for its next
// request. fasthttp keeps a connection's body buffer at the size of the largest body it read,
// for as long as the connection lives: keep-alive connections that each once carried a
// 1000-message push held about 0.5 MB apiece, memory the collector cannot take back (40 MB
// for a client pool of 64 connections). A larger buffer is dropped once the handler is done;
// the next large body allocates its own.
const keptBodyBytes = 64 << 10

// withRequest gives every request an id and the broker's logger before anything else runs, and
// turns a handler's panic into a logged internal error instead of a dead broker. It drops a
// request body buffer larger than keptBodyBytes once the request is served.
func (s *Server) withRequest(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		id := httpkit.NewRequestID()
		ctx.SetUserValue(requestIDKey{}, id)
		ctx.SetUserValue(loggerKey{}, s.Log)
		ctx.Response.Header.Set(RequestIDHeader, id)
		defer func() {
			if p := recover(); p != nil {
				s.Log.Error("request handler panicked", "request_id", id, "method", string(ctx.Method()),
					"path", string(ctx.Path()), "panic", p, "stack", string(debug.Stack()))
				writeInternalError(ctx)
			}
		}()
		next(ctx)
		if cap(ctx.Request.Body()) > keptBodyBytes {
			ctx.Request.SwapBody(nil)
		}
	}
}

// requestID is the id withRequest gave the request ("" outside a request).
func requestID(ctx *fasthttp.RequestCtx) string {
	id, _ := ctx.UserValue(requestIDKey{}).(string)
	return id
}

// requestLog is the logger of the broker serving the request.
func requestLog(ctx *fasthttp.RequestCtx) *slog.Logger {
	if l, ok := ctx.UserValue(loggerKey{}).(*slog.Logger); ok && l != nil {
		return l
	}
	return slog.Default()
}

// internalErrorBody is the whole answer to an unexpected error: the detail stays in the log,
// where the request id finds it.
type internalErrorBody struct {
	Error     string `json:"error"`
	RequestID string `json:"requestId"`
}

func writeInternalError(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, fasthttp.StatusInternalServerError, internalErrorBody{Error: "internal error", RequestID: requestID(ctx)})
}

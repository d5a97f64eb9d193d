package http

import (
	"encoding/json"
	"errors"
	"log/slog"

	"github.com/valyala/fasthttp"

	"queen/persistence"
)

// setCORS writes the CORS headers the reference broker sends on every JSON response.
func setCORS(ctx *fasthttp.RequestCtx) {
	h := &ctx.Response.Header
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS")
	h.Set("Access-Control-Allow-Headers", "Content-Type, Authorization")
}

// writeJSON answers with status and v encoded as JSON. A nil slice must be passed as an empty
// one by the caller: the clients expect [] and {"messages":[]}, never an empty body or null.
func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		slog.Error("cannot encode response", "path", string(ctx.Path()), "err", err)
		status, body = fasthttp.StatusInternalServerError, []byte(`{"error":"cannot encode response"}`)
	}
	setCORS(ctx)
	ctx.SetContentType("application/json")
	ctx.SetStatusCode(status)
	ctx.SetBody(body)
}

// errorBody is the shape of every error answer.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code,omitempty"`
}

// badRequest is an input error; its message names the offending field.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badf(msg string) error { return &badRequest{msg} }

// writeError maps err to a status: 400 for bad input, 503 when PostgreSQL cannot be reached,
// 500 otherwise. Internal errors are logged with the route, since the client only sees a summary.
func writeError(ctx *fasthttp.RequestCtx, err error) {
	var bad *badRequest
	switch {
	case errors.As(err, &bad):
		writeJSON(ctx, fasthttp.StatusBadRequest, errorBody{Error: bad.msg})
	case errors.Is(err, errDeadline):
		slog.Warn("request timed out waiting for the database", "path", string(ctx.Path()))
		writeJSON(ctx, fasthttp.StatusServiceUnavailable, errorBody{Error: "database did not answer in time"})
	case persistence.IsUnavailable(err):
		slog.Warn("database unavailable", "path", string(ctx.Path()), "err", err)
		writeJSON(ctx, fasthttp.StatusServiceUnavailable, errorBody{Error: "database unavailable"})
	default:
		slog.Error("request failed", "path", string(ctx.Path()), "err", err)
		writeJSON(ctx, fasthttp.StatusInternalServerError, errorBody{Error: err.Error()})
	}
}

var errDeadline = errors.New("deadline exceeded waiting for the database")

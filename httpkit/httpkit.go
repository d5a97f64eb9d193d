// Package httpkit is what the broker's and the front door's fasthttp servers share: the JSON
// answer, request ids, and fasthttp's logger on slog.
package httpkit

import (
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"strconv"

	"github.com/valyala/fasthttp"
)

// JSON answers v as JSON with status. It reports an encoding failure without answering, so
// that the caller can log it and answer 500 its own way.
func JSON(ctx *fasthttp.RequestCtx, status int, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx.SetContentType("application/json")
	ctx.SetStatusCode(status)
	ctx.Response.SetBodyRaw(body)
	return nil
}

// NewRequestID is a request id: 16 hexadecimal digits, unique enough to find a request's log
// lines, drawn without a system call.
func NewRequestID() string {
	const digits = 16
	s := strconv.FormatUint(rand.Uint64(), 16)
	for len(s) < digits {
		s = "0" + s
	}
	return s
}

// Logger is fasthttp's logger on slog, at debug level: what fasthttp reports (a client that
// went away mid-request, say) is routine.
type Logger struct{ Log *slog.Logger }

// Printf logs one fasthttp message.
func (l Logger) Printf(format string, args ...any) {
	l.Log.Debug("fasthttp", "msg", format, "args", args)
}

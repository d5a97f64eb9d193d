package http

import (
	"errors"
	"sync"

	"github.com/valyala/fasthttp"

	"queen/httpkit"
	"queen/persistence"
	"queen/writer"
)

// writeJSON answers with status and v encoded as JSON. A nil slice must be passed as an empty
// one by the caller: the clients expect [] and {"messages":[]}, never an empty body or null.
// The body is handed to fasthttp as it is, not copied into the connection's response buffer,
// which would keep the size of the largest answer (a 1000-item push's results) for as long
// as the connection lives.
func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	if err := httpkit.JSON(ctx, status, v); err != nil {
		requestLog(ctx).Error("cannot encode response", "request_id", requestID(ctx), "path", string(ctx.Path()), "err", err)
		ctx.Response.Reset()
		ctx.SetContentType("application/json")
		ctx.SetStatusCode(fasthttp.StatusInternalServerError)
		ctx.SetBodyString(`{"error":"cannot encode response"}`)
	}
}

// answerBuffers are the buffers the push and pop answers are built in, used again once the
// answer is written instead of becoming garbage with each one (the pop answers alone were a
// tenth of what the broker allocated under bench cost). fasthttp writes a body set with
// SetBodyRaw from the buffer itself and, once written, resets the request, which closes its
// user values: an answerBuffer's Close puts it back here.
var answerBuffers sync.Pool

// maxPooledAnswer bounds the buffers kept: a rare huge answer is left to the collector.
const maxPooledAnswer = 1 << 20

type answerBuffer struct{ b []byte }

type answerBufferKey struct{}

// Close returns the buffer to the pool: fasthttp calls it when it resets the request, after
// the answer has been written.
func (a *answerBuffer) Close() error {
	if cap(a.b) <= maxPooledAnswer {
		a.b = a.b[:0]
		answerBuffers.Put(a)
	}
	return nil
}

// setBuiltBody sets the answer's body to what build appends to an empty buffer of at least
// size bytes.
func setBuiltBody(ctx *fasthttp.RequestCtx, size int, build func([]byte) []byte) {
	a, _ := answerBuffers.Get().(*answerBuffer)
	if a == nil {
		a = &answerBuffer{}
	}
	if cap(a.b) < size {
		a.b = make([]byte, 0, size)
	}
	a.b = build(a.b[:0])
	ctx.Response.SetBodyRaw(a.b)
	ctx.SetUserValue(answerBufferKey{}, a)
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
// 500 otherwise. Only a badRequest's text reaches the client: any other error may carry the
// database's words, so it is logged with the request id and answered with the id alone. A
// push the disk spool had no room for is a 503 too, with a text of its own.
func writeError(ctx *fasthttp.RequestCtx, err error) {
	var bad *badRequest
	var large *tooLarge
	var sealed *writer.EncryptionRequired
	var answered *statusError
	log := requestLog(ctx)
	switch {
	case errors.As(err, &answered):
		writeJSON(ctx, answered.status, errorBody{Error: answered.msg})
	case errors.As(err, &bad):
		writeJSON(ctx, fasthttp.StatusBadRequest, errorBody{Error: bad.msg})
	case errors.As(err, &large):
		writeJSON(ctx, fasthttp.StatusRequestEntityTooLarge, errorBody{Error: large.msg})
	case errors.As(err, &sealed):
		// Storing the payload in clear is what the queue's flag forbids; a retry cannot help.
		writeJSON(ctx, fasthttp.StatusConflict, errorBody{Error: sealed.Error()})
	case errors.Is(err, writer.ErrSpoolFull):
		ctx.Response.Header.Set("Retry-After", "1")
		writeJSON(ctx, fasthttp.StatusServiceUnavailable, errorBody{Error: writer.ErrSpoolFull.Error(), Code: "spool_full"})
	case errors.Is(err, errDeadline), errors.Is(err, writer.ErrNoAnswer):
		log.Warn("request timed out waiting for the database", "request_id", requestID(ctx), "path", string(ctx.Path()))
		writeJSON(ctx, fasthttp.StatusServiceUnavailable, errorBody{Error: "database did not answer in time"})
	case persistence.IsUnavailable(err):
		log.Warn("database unavailable", "request_id", requestID(ctx), "path", string(ctx.Path()), "err", err)
		writeJSON(ctx, fasthttp.StatusServiceUnavailable, errorBody{Error: "database unavailable"})
	default:
		log.Error("request failed", "request_id", requestID(ctx), "method", string(ctx.Method()), "path", string(ctx.Path()), "err", err)
		writeInternalError(ctx)
	}
}

// statusError is an answer of its own status: a resource that does not exist (404), a state
// that forbids the request (409).
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

func notFoundf(msg string) error { return &statusError{fasthttp.StatusNotFound, msg} }

func conflictf(msg string) error { return &statusError{fasthttp.StatusConflict, msg} }

// tooLarge is a request that exceeds a size limit (413).
type tooLarge struct{ msg string }

func (e *tooLarge) Error() string { return e.msg }

var errDeadline = errors.New("deadline exceeded waiting for the database")

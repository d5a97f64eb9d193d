package http

// The validation boundary. Every string that arrives from the network passes here before a
// handler, an actor or PostgreSQL sees it: path parameters (percent-decoded once, here), query
// values, and every string and key of a JSON body. Each must be valid UTF-8 without U+0000
// (PostgreSQL's text and jsonb refuse both, and an error from the database would fail a fused
// batch or leak its message) and no longer than the cap of its kind. A failure answers 400
// naming the parameter. New wraps every route of the table in checkInput, and a route whose
// path names a parameter of no known kind makes New panic, so no route can skip the boundary.
//
// What the boundary does not do is check meaning: a handler still parses UUIDs, numbers and
// timestamps, and refuses empty names where a name is required.

import (
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/valyala/fasthttp"
)

// Caps by kind of string. maxName is shared with the decoders (decode.go).
const (
	// maxIDParam bounds partition and lease ids in paths; the handler parses them as UUIDs.
	maxIDParam = 64
	// maxQueryValue bounds query values that are not names (timestamps, numbers, flags).
	maxQueryValue = 1024
	// maxBodyText bounds body strings that are neither names nor payloads (an ack's error
	// message, a trace's event type): generous for text, far below what would hurt a batch.
	maxBodyText = 64 << 10
	// maxBodyDepth bounds nesting outside payloads; the reference's bodies nest four deep.
	maxBodyDepth = 32
)

// pathParamCaps gives the cap of every path parameter a route may declare.
var pathParamCaps = map[string]int{
	"queue":         maxName,
	"partition":     maxName,
	"group":         maxName,
	"traceName":     maxName,
	"transactionId": maxName,
	"partitionId":   maxIDParam,
	"leaseId":       maxIDParam,
	"file":          maxName,
	"query":         maxName,
}

// nameKey reports whether a query key or body field holds a name, capped at maxName. A switch,
// not a map: the walk of a push body asks it for every string value, and the map's hashing
// was a third of the walk in bench cost.
func nameKey(k []byte) bool {
	switch string(k) {
	case "queue", "partition", "consumerGroup", "group", "namespace", "ns", "task", "transactionId",
		"traceName", "traceNames", "partitionId", "leaseId", "workerId":
		return true
	}
	return false
}

// freeJSON reports whether a body field's value is the client's own JSON (message payloads, a
// stream's state values): stored as given after the payload rules of sanitizePayload, so the
// name rules do not apply inside it.
func freeJSON(k []byte) bool {
	switch string(k) {
	case "payload", "data", "value":
		return true
	}
	return false
}

// routeParams lists the {name} parameters of a route path and panics on a name without a cap.
func routeParams(path string) []string {
	var names []string
	for rest := path; ; {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			return names
		}
		end := strings.IndexByte(rest[open:], '}')
		name, _, _ := strings.Cut(rest[open+1:open+end], ":")
		if _, ok := pathParamCaps[name]; !ok {
			panic(fmt.Sprintf("route %s: path parameter %q has no validation rule in pathParamCaps", path, name))
		}
		names = append(names, name)
		rest = rest[open+end:]
	}
}

// checkInput runs h only when every path parameter in params, every query value and every body
// string is acceptable. Path parameters are stored back percent-decoded: pathParam returns them.
func (s *Server) checkInput(params []string, h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if err := checkRequest(ctx, params, s.Config.MaxRequestItems); err != nil {
			writeError(ctx, err)
			return
		}
		h(ctx)
	}
}

func checkRequest(ctx *fasthttp.RequestCtx, params []string, maxItems int) error {
	for _, name := range params {
		raw, _ := ctx.UserValue(name).(string)
		v, err := url.PathUnescape(raw)
		if err != nil {
			return badf(name + " is not validly percent-encoded")
		}
		if err := checkString(v, name, pathParamCaps[name]); err != nil {
			return err
		}
		if name == "file" && strings.Contains("/"+v+"/", "/../") {
			return badf("file must not contain a .. segment")
		}
		ctx.SetUserValue(name, v)
	}
	for k, v := range ctx.QueryArgs().All() {
		key := string(k)
		if err := checkString(key, "query parameter name", maxQueryValue); err != nil {
			return err
		}
		limit := maxQueryValue
		if nameKey(k) {
			limit = maxName
		}
		if err := checkString(string(v), key, limit); err != nil {
			return err
		}
	}
	return checkBody(ctx.PostBody(), maxItems)
}

// checkString applies the rules every string shares: valid UTF-8, no U+0000, at most limit
// characters.
func checkString(s, name string, limit int) error {
	if !utf8.ValidString(s) {
		return badf(name + " must be valid UTF-8")
	}
	if strings.IndexByte(s, 0) >= 0 {
		return badf(name + ` must not contain the character \u0000`)
	}
	if len(s) > limit && utf8.RuneCountInString(s) > limit {
		return badf(fmt.Sprintf("%s must be at most %d characters", name, limit))
	}
	return nil
}

// pathParam returns a path parameter as checkInput stored it: percent-decoded and checked.
func pathParam(ctx *fasthttp.RequestCtx, name string) string {
	v, _ := ctx.UserValue(name).(string)
	return v
}

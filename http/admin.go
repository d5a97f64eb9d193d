package http

import "github.com/valyala/fasthttp"

// Placeholders until the admin routes land; each answers 501.
func notImplemented(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, fasthttp.StatusNotImplemented, errorBody{Error: "not implemented yet"})
}

func (s *Server) configure(ctx *fasthttp.RequestCtx)                { notImplemented(ctx) }
func (s *Server) recordTrace(ctx *fasthttp.RequestCtx)              { notImplemented(ctx) }
func (s *Server) traceNames(ctx *fasthttp.RequestCtx)               { notImplemented(ctx) }
func (s *Server) tracesByName(ctx *fasthttp.RequestCtx)             { notImplemented(ctx) }
func (s *Server) messageTraces(ctx *fasthttp.RequestCtx)            { notImplemented(ctx) }
func (s *Server) listQueues(ctx *fasthttp.RequestCtx)               { notImplemented(ctx) }
func (s *Server) getQueue(ctx *fasthttp.RequestCtx)                 { notImplemented(ctx) }
func (s *Server) deleteQueue(ctx *fasthttp.RequestCtx)              { notImplemented(ctx) }
func (s *Server) listMessages(ctx *fasthttp.RequestCtx)             { notImplemented(ctx) }
func (s *Server) getMessage(ctx *fasthttp.RequestCtx)               { notImplemented(ctx) }
func (s *Server) deleteMessage(ctx *fasthttp.RequestCtx)            { notImplemented(ctx) }
func (s *Server) listDLQ(ctx *fasthttp.RequestCtx)                  { notImplemented(ctx) }
func (s *Server) listConsumerGroups(ctx *fasthttp.RequestCtx)       { notImplemented(ctx) }
func (s *Server) getConsumerGroup(ctx *fasthttp.RequestCtx)         { notImplemented(ctx) }
func (s *Server) deleteConsumerGroup(ctx *fasthttp.RequestCtx)      { notImplemented(ctx) }
func (s *Server) updateSubscription(ctx *fasthttp.RequestCtx)       { notImplemented(ctx) }
func (s *Server) deleteConsumerGroupQueue(ctx *fasthttp.RequestCtx) { notImplemented(ctx) }
func (s *Server) seekQueue(ctx *fasthttp.RequestCtx)                { notImplemented(ctx) }
func (s *Server) seekPartition(ctx *fasthttp.RequestCtx)            { notImplemented(ctx) }

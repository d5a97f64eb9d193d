package http

import (
	"encoding/json"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"queen/httpkit"
	"queen/persistence"
)

// Listeners: with QUEEN_METRICS_BIND_ADDR set, /metrics and /metrics/prometheus are served on
// that address only, so an operator can keep them off a network that tenants reach (their
// per-queue series name every queue). The handlers are the same on either listener.

var metricsPaths = []string{"/metrics", "/metrics/prometheus"}

// mainHandlers are the handlers of the main listener. When the metrics have a listener of
// their own, their routes answer 404 here (rather than the dashboard shell of the fallback).
func (s *Server) mainHandlers() map[string]handler {
	hs := s.handlers()
	if s.Config.MetricsBindAddr != "" {
		for _, path := range metricsPaths {
			hs["GET "+path] = plain(noSuchRoute)
		}
	}
	return hs
}

func noSuchRoute(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, fasthttp.StatusNotFound, errorBody{Error: "Not Found", Code: "no_such_route"})
}

// metricsServer is the server of the metrics listener, nil when there is none.
func (s *Server) metricsServer() *fasthttp.Server {
	if s.Config.MetricsBindAddr == "" {
		return nil
	}
	s.metricsOnce.Do(func() {
		s.metrics = &fasthttp.Server{
			// Request ids and panic recovery as on the main listener.
			Handler: s.withRequest(answer(func(ctx *fasthttp.RequestCtx) error {
				switch {
				case !ctx.IsGet() && !ctx.IsHead():
					noSuchRoute(ctx)
				case string(ctx.Path()) == "/metrics":
					return s.metricsJSON(ctx)
				case string(ctx.Path()) == "/metrics/prometheus":
					return s.metricsPrometheus(ctx)
				default:
					noSuchRoute(ctx)
				}
				return nil
			})),
			Name:               "queen-metrics",
			MaxRequestBodySize: 4096,
			ReadTimeout:        30 * time.Second,
			IdleTimeout:        2 * time.Minute,
			Logger:             httpkit.Logger{Log: s.Log},
			CloseOnShutdown:    true,
		}
	})
	return s.metrics
}

// ServeMetrics serves the metrics routes on ln (QUEEN_METRICS_BIND_ADDR) until Shutdown.
func (s *Server) ServeMetrics(ln net.Listener) error {
	m := s.metricsServer()
	if m == nil {
		return errors.New("QUEEN_METRICS_BIND_ADDR is not set")
	}
	err := m.Serve(ln)
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Payload encryption. Writes are sealed by the writer (queen/writer); reads open what is
// stored sealed.

// openFailures counts payloads that are stored sealed but could not be opened.
var openFailures atomic.Uint64

// openPayload returns the stored payload of the message transactionID of queue in clear when
// encrypted says it is sealed (the message's is_encrypted flag, not the payload's shape: a
// client cannot have the broker decrypt an envelope it pushed into a clear queue).
func (s *Server) openPayload(p json.RawMessage, encrypted bool, queue persistence.QueueName, transactionID string) json.RawMessage {
	if !encrypted {
		return p
	}
	return s.open(p, queue.Stored(), transactionID)
}

// open returns a sealed payload in clear; stored is its queue's stored name, which the envelope
// is bound to. One that cannot be opened (no key, another key, damaged, or another message's
// envelope copied into this row) is returned as stored, as the reference does, and logged
// (sampled).
func (s *Server) open(p json.RawMessage, stored, transactionID string) json.RawMessage {
	var err error
	if s.PayloadKey == nil {
		err = errors.New("QUEEN_ENCRYPTION_KEY is not set")
	} else {
		var plain json.RawMessage
		if plain, err = s.PayloadKey.Open(p, stored, transactionID); err == nil {
			return plain
		}
	}
	if n := openFailures.Add(1); n%10000 == 1 && s.Log != nil {
		s.Log.Warn("cannot decrypt a stored payload; returning it as stored", "err", err, "occurrences", n)
	}
	return p
}

// openMessages opens the sealed payloads of messages popped from queue in place.
func (s *Server) openMessages(queue persistence.QueueName, msgs []persistence.Message) {
	stored := "" // made at the first sealed message: a pop of clear messages builds nothing
	for i := range msgs {
		if m := &msgs[i]; m.Encrypted {
			if stored == "" {
				stored = queue.Stored()
			}
			m.Payload = s.open(m.Payload, stored, m.TransactionID)
		}
	}
}

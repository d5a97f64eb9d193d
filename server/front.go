package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"queen/config"
	queenhttp "queen/http"
)

// front is the broker's HTTP side: the API listener on QUEEN_BIND_ADDR:PORT and, when
// QUEEN_METRICS_BIND_ADDR is set, the metrics listener, both served by one queenhttp.Server.
type front struct {
	log       *slog.Logger
	http      *queenhttp.Server
	ln        net.Listener
	metricsLn net.Listener // nil when the metrics share the API listener
	failed    chan error   // a listener that really failed; one slot per listener, so none blocks
}

// startFront binds the listeners (ln, when given, is the API listener) and starts serving.
func startFront(cfg config.Config, log *slog.Logger, h *queenhttp.Server, ln net.Listener) (_ *front, err error) {
	f := &front{log: log, http: h, ln: ln, failed: make(chan error, 2)}
	if cfg.MetricsBindAddr != "" {
		if f.metricsLn, err = net.Listen("tcp", cfg.MetricsBindAddr); err != nil {
			return nil, fmt.Errorf("cannot listen on QUEEN_METRICS_BIND_ADDR %s: %w", cfg.MetricsBindAddr, err)
		}
	}
	if f.ln == nil {
		addr := net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.Port))
		if f.ln, err = net.Listen("tcp", addr); err != nil {
			if f.metricsLn != nil {
				f.metricsLn.Close()
			}
			return nil, fmt.Errorf("cannot listen on %s: %w", addr, err)
		}
	}
	go f.serve("HTTP", f.ln, h.Serve)
	log.Info("http listening", "addr", f.ln.Addr().String(), "max_body_bytes", cfg.MaxBodyBytes)
	if f.metricsLn != nil {
		go f.serve("metrics", f.metricsLn, h.ServeMetrics)
		log.Info("metrics listening on their own address; /metrics and /metrics/prometheus are not served on the HTTP port",
			"addr", f.metricsLn.Addr().String())
	}
	return f, nil
}

// serve runs one listener until stop, retrying the accept errors that pass. Serve returns an
// error only when the listener really failed: that is reported on failed, naming the listener.
func (f *front) serve(name string, ln net.Listener, serve func(net.Listener) error) {
	if err := serve(newRetryListener(ln, name, f.log)); err != nil {
		f.failed <- fmt.Errorf("the %s listener on %s failed: %w", name, ln.Addr(), err)
	}
}

// stop stops accepting and waits for open requests to finish.
func (f *front) stop(ctx context.Context) error { return f.http.Shutdown(ctx) }

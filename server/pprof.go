package server

import (
	"log/slog"
	"net/http"
	"net/http/pprof"
	"time"
)

// startPprof serves the Go profiler on addr, a listener of its own so profiles stay off the
// API port. It is for operators chasing a performance problem; keep addr on loopback.
func startPprof(addr string, log *slog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
			log.Error("pprof listener stopped", "addr", addr, "err", err)
		}
	}()
	log.Info("pprof listening", "addr", addr)
	return srv
}

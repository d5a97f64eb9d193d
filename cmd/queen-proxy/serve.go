package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"queen/config"
	"queen/proxy"
	"queen/proxy/pxdb"
)

// runServe runs the proxy until SIGTERM or SIGINT; SIGHUP reloads the TLS certificate. The
// configuration is checked whole and the control-plane database reached before the listener
// is bound, and the certificate and the cells are loaded before anything is served, so a bad
// setting never serves anything.
func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("serve takes no arguments (configuration comes from the environment), got %q", args)
	}
	cfg, err := config.LoadProxy(getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	store, err := pxdb.Open(ctx, cfg.DB, log)
	if err != nil {
		return err
	}
	defer store.Close()
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.Port)))
	if err != nil {
		return fmt.Errorf("cannot listen on %s:%d: %w", cfg.BindAddr, cfg.Port, err)
	}
	log.Info("queen-proxy starting", "addr", ln.Addr().String(), "enforce", cfg.Enforce, "tenant_header", cfg.TenantHeader,
		"sessions", cfg.JWTSecret != "")
	p, err := proxy.Start(ctx, cfg, store, log, ln)
	if err != nil {
		ln.Close()
		return err
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			if err := p.ReloadCertificate(); err != nil {
				log.Error("certificate reload failed; the previous certificate stays", "err", err)
				continue
			}
			log.Info("certificate reloaded", "cert", cfg.TLSCert)
		}
	}()

	select {
	case <-ctx.Done():
		log.Info("shutting down", "reason", "signal")
	case <-p.Done():
		log.Error("the listener stopped serving")
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return p.Shutdown(shutdownCtx)
}

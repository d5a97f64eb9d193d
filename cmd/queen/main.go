// Command queen runs the broker: configuration from the environment, one boot log line per
// subsystem, graceful shutdown on SIGTERM or SIGINT.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"queen/config"
	"queen/server"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "queen:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	slog.SetDefault(log)
	log.Info("queen starting", "version", server.Version, "server_id", cfg.ServerID)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	b, err := server.Start(ctx, cfg, log, server.Options{})
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		log.Info("shutting down", "reason", "signal")
	case err := <-b.Done():
		log.Error("http server stopped", "err", err)
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return b.Shutdown(shutdownCtx)
}

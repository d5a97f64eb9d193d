// Command queen runs the broker: configuration from the environment, one boot log line per
// subsystem, graceful shutdown on SIGTERM or SIGINT.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/google/uuid"

	"queen/config"
	"queen/server"
)

// defaultMemoryLimit is the soft memory limit when GOMEMLIMIT is not set. The Go runtime's
// memory is most of the broker's RSS, and about 11 MB come on top of it: with GOGC at 300,
// bench mixed peaked at 55 MB with this limit against 58 MB with 48 MB, and bench all at 62 MB
// with 48 MB, close to the 64 MB the broker is held to.
const defaultMemoryLimit = 44 << 20

// defaultGCPercent is the collector's GOGC when the environment does not set one. Under bench
// cost the live heap is 8-10 MB: at 100 a cycle started after about 10 MB of allocation, at
// 300 the soft limit starts it, at a goal of about 32 MB (GODEBUG=gctrace=1), so the collector
// runs about a third as often within the same RSS ceiling (docs/performance.md, ninth round).
// GOGC, when set, wins.
const defaultGCPercent = 300

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
	// The broker's live heap is small (tens of MB under load); what grows RSS is garbage from
	// bursts of large requests that the runtime keeps mapped. A soft limit makes the collector
	// and the scavenger hand it back. GOMEMLIMIT, when set, wins.
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}

	// Message and lease ids take their randomness from crypto/rand in blocks of a few KB
	// instead of a read per id (2 % of the broker's CPU under bench cost). Before anything
	// mints one: the pool is set up unsynchronised.
	uuid.EnableRandPool()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	b, err := server.Start(ctx, cfg, log, server.Options{})
	if err != nil {
		return err
	}
	// A failed listener stops the broker with a non-zero exit, so a supervisor restarts it
	// instead of taking the stop for a requested one.
	var failed error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "reason", "signal")
	case failed = <-b.Done():
		log.Error("shutting down: a listener failed", "err", failed)
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return errors.Join(failed, b.Shutdown(shutdownCtx))
}

package pg

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"queen/pg/localpg"
)

// Target is how to reach the PostgreSQL that Settings name.
type Target struct {
	ConnString string
	TLS        *tls.Config // nil: plaintext, or the private cluster's unix socket
	// Local is the private PostgreSQL this process started, to be stopped with it; nil when the
	// settings name servers, or another process runs the private one.
	Local *localpg.Cluster
}

// Reach resolves s: its servers with their TLS configuration, or else the private PostgreSQL
// under DataDir, started here. With share, a private PostgreSQL that another process of ours
// already runs in DataDir is used as it is (the front door's commands while it serves); without,
// that is an error. attrs go on the "config: postgres" line (the pool's settings).
func Reach(ctx context.Context, s Settings, log *slog.Logger, share bool, attrs ...any) (Target, error) {
	if len(s.Servers) > 0 {
		log.Info("using PostgreSQL", "hosts", s.Hosts(), "database", s.DB, "user", s.User)
		t, err := s.TLS(log, attrs...)
		if err != nil {
			return Target{}, err
		}
		return Target{ConnString: s.ConnString(), TLS: t}, nil
	}
	if s.UseSSL {
		log.Warn(s.Prefix + "USE_SSL is ignored: " + s.Prefix + "HOST is unset, and the local PostgreSQL is reached over a unix socket")
	}
	log.Info("config: postgres", append([]any{"mode", "local", "data_dir", s.DataDir}, attrs...)...)
	dir, err := filepath.Abs(s.DataDir)
	if err != nil {
		return Target{}, fmt.Errorf("cannot resolve the data directory %s: %w", s.DataDir, err)
	}
	cl, err := localpg.Start(ctx, localpg.Options{DataDir: dir, Logger: log})
	switch {
	case err == nil:
		return Target{ConnString: cl.ConnString("postgres"), Local: cl}, nil
	case share && errors.Is(err, localpg.ErrInUse):
		log.Info("using the local PostgreSQL that another process runs", "data_dir", dir)
		return Target{ConnString: localpg.DataDirConnString(dir, "postgres")}, nil
	default:
		return Target{}, fmt.Errorf("cannot start the local PostgreSQL (%sHOST is unset): %w", s.Prefix, err)
	}
}

// Stop stops the private PostgreSQL the target started, if any.
func (t *Target) Stop(log *slog.Logger) {
	if t.Local == nil {
		return
	}
	if err := t.Local.Stop(); err != nil {
		log.Error("cannot stop the local PostgreSQL", "err", err)
	}
	t.Local = nil
}

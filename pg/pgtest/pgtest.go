// Package pgtest gives integration tests a PostgreSQL database with the broker's schema: one
// throwaway cluster per test binary, one fresh database per test, cloned from a migrated template.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"queen/migrations"
	"queen/pg/localpg"
)

// dirPrefix names the temp directories of the clusters under /tmp, so that one left behind by a
// killed test binary can be found and removed by the next.
const dirPrefix = "queen-pgtest-"

var (
	connString func(db string) string // set by Main
	admin      *pgxpool.Pool          // on the maintenance database "postgres"
	template   string
	runID      string // tells this binary's databases from other binaries' on a shared PG_HOST
	seq        atomic.Int64
	// external is set when the tests use a PG_HOST server: its databases must be dropped one by
	// one. A throwaway cluster is removed whole at the end instead, which spares every test the
	// checkpoint that DROP DATABASE forces (about a second each on this hardware).
	external bool

	// CREATE DATABASE ... TEMPLATE fails when another session uses the template; what counts
	// as using it has varied between server versions, so copies are made one at a time.
	createMu sync.Mutex
)

// Main runs a package's tests against a fresh cluster; call it from TestMain.
func Main(m *testing.M) {
	flag.Parse()
	// go test -list (as run by the Makefile's fuzz loop) runs no test: spare it the cluster.
	if f := flag.Lookup("test.list"); f != nil && f.Value.String() != "" {
		os.Exit(m.Run())
	}
	code, err := run(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run(m *testing.M) (code int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var b [6]byte
	_, _ = rand.Read(b[:])
	runID = hex.EncodeToString(b[:])

	external = os.Getenv("PG_HOST") != ""
	if external {
		connString = externalConnString(os.Getenv("PG_HOST"))
		// Other test binaries share the server: each needs a template of its own.
		template = "queen_template_" + runID
	} else {
		// Not :=, which would shadow the err that the deferred stop reports into.
		var stop func() error
		if stop, err = startCluster(ctx, log); err != nil {
			return 1, err
		}
		defer func() {
			if serr := stop(); serr != nil && err == nil {
				err = serr
			}
		}()
		template = "queen_template"
	}

	admin, err = pgxpool.New(ctx, connString("postgres"))
	if err != nil {
		return 1, fmt.Errorf("cannot connect to the test server: %w", err)
	}
	defer admin.Close()
	if err := createTemplate(ctx, log); err != nil {
		return 1, err
	}
	if external {
		defer dropDatabase(context.Background(), template)
	}
	return m.Run(), nil
}

// startCluster starts a cluster in a new directory under /tmp (not os.TempDir: TMPDIR may lie
// below a directory that the cluster's user cannot enter when we are root) and returns the
// function that stops it and removes the directory.
func startCluster(ctx context.Context, log *slog.Logger) (stop func() error, err error) {
	sweepLeftovers()
	dir, err := os.MkdirTemp("/tmp", dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("cannot create a directory for the test cluster: %w", err)
	}
	// Held until we exit, so the sweep of another binary leaves this directory alone.
	lock, err := lockFile(filepath.Join(dir, "pgtest.lock"))
	if err == nil {
		// MkdirTemp makes it 0700; when we are root the cluster's own user has to enter it.
		err = os.Chmod(dir, 0o755)
	}
	var cluster *localpg.Cluster
	if err == nil {
		cluster, err = localpg.Start(ctx, localpg.Options{DataDir: dir, Logger: log})
	}
	if err != nil {
		if lock != nil {
			lock.Close()
		}
		os.RemoveAll(dir)
		return nil, fmt.Errorf("cannot start the test cluster: %w", err)
	}
	connString = cluster.ConnString
	return func() error {
		err := cluster.Stop()
		lock.Close()
		os.RemoveAll(dir)
		return err
	}, nil
}

func createTemplate(ctx context.Context, log *slog.Logger) error {
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{template}.Sanitize()); err != nil {
		return fmt.Errorf("cannot create %s: %w", template, err)
	}
	conn, err := pgx.Connect(ctx, connString(template))
	if err != nil {
		return fmt.Errorf("cannot connect to %s: %w", template, err)
	}
	err = migrations.Set.Apply(ctx, conn, log)
	// Copying a template needs it free of sessions, ours included.
	conn.Close(context.Background())
	if err != nil {
		return fmt.Errorf("cannot migrate %s: %w", template, err)
	}
	// Nor may a test connect to it by mistake and so break every copy after.
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{template}.Sanitize()+" ALLOW_CONNECTIONS false"); err != nil {
		return fmt.Errorf("cannot close %s to connections: %w", template, err)
	}
	return nil
}

// NewDatabase creates a database with the broker's schema and returns its conn string. It is
// dropped when t ends on a PG_HOST server, and with the whole throwaway cluster otherwise.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return create(t, template)
}

// create creates a test database as a copy of from and returns its conn string.
func create(t testing.TB, from string) string {
	t.Helper()
	if admin == nil {
		t.Fatal("pgtest: no test server; call pgtest.Main from TestMain")
	}
	name := fmt.Sprintf("queen_test_%s_%d", runID, seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createMu.Lock()
	_, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{from}.Sanitize())
	createMu.Unlock()
	if err != nil {
		t.Fatalf("pgtest: cannot create database %s: %v", name, err)
	}
	if external {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := dropDatabase(ctx, name); err != nil {
				t.Errorf("pgtest: %v", err)
			}
		})
	}
	return connString(name)
}

// NewEmptyDatabase creates a database with no schema and returns its conn string, for tests of
// the migrations themselves (an upgrade from an older schema). It is dropped as NewDatabase's are.
func NewEmptyDatabase(t testing.TB) string {
	t.Helper()
	return create(t, "template0")
}

// NewPool is NewDatabase plus a pool on the new database, closed when t ends.
func NewPool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	cs := NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, cs)
	if err != nil {
		t.Fatalf("pgtest: cannot open a pool on %s: %v", cs, err)
	}
	t.Cleanup(pool.Close)
	return pool, cs
}

// ConnString returns the conn string of database db on the test server.
func ConnString(db string) string {
	if connString == nil {
		panic("pgtest: no test server; call pgtest.Main from TestMain")
	}
	return connString(db)
}

func dropDatabase(ctx context.Context, name string) error {
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("cannot drop database %s: %w", name, err)
	}
	return nil
}

func externalConnString(host string) func(string) string {
	base := "host=" + quote(host)
	for _, kv := range [][2]string{{"port", "PG_PORT"}, {"user", "PG_USER"}, {"password", "PG_PASSWORD"}} {
		if v := os.Getenv(kv[1]); v != "" {
			base += " " + kv[0] + "=" + quote(v)
		}
	}
	return func(db string) string { return base + " dbname=" + quote(db) }
}

// quote quotes a value for a keyword/value conn string when it needs it.
func quote(v string) string {
	if v != "" && !strings.ContainsAny(v, ` '\`+"\t\n\r") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// sweepLeftovers removes the directories of test binaries that died without cleaning up
// (a timeout panic, ^C). Their servers then stop by themselves: a postmaster shuts down
// within a minute of finding its postmaster.pid gone.
func sweepLeftovers() {
	dirs, _ := filepath.Glob(filepath.Join("/tmp", dirPrefix+"*"))
	for _, dir := range dirs {
		fi, err := os.Stat(dir)
		// A young directory may belong to a binary that has not taken its lock yet.
		if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		lock, err := lockFile(filepath.Join(dir, "pgtest.lock"))
		if errors.Is(err, syscall.EWOULDBLOCK) {
			continue // its binary is still running
		}
		os.RemoveAll(dir)
		if lock != nil {
			lock.Close()
		}
	}
}

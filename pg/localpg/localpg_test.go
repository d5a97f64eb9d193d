package localpg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// tempDataDir makes a directory under /tmp: t.TempDir may live below a directory the cluster's
// unprivileged user cannot enter (e.g. /root/.cache when TMPDIR points there).
func tempDataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "localpg")
	if err != nil {
		t.Fatal(err)
	}
	// MkdirTemp makes it 0700 owned by us; the cluster's user has to enter it when we are root.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, nil))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func startCluster(t *testing.T, ctx context.Context, dir string) *Cluster {
	t.Helper()
	c, err := Start(ctx, Options{DataDir: dir, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return c
}

func connect(t *testing.T, ctx context.Context, c *Cluster) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		t.Fatalf("connect with %q: %v", c.ConnString("postgres"), err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestStartRestartKeepsData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := tempDataDir(t)

	c := startCluster(t, ctx, dir)
	if got, want := c.SocketDir(), filepath.Join(dir, "run"); got != want {
		t.Errorf("SocketDir = %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "run", ".s.PGSQL.5432")); err != nil {
		t.Errorf("no socket in the run directory: %v", err)
	}
	conn := connect(t, ctx, c)
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
	settings := map[string]string{
		"listen_addresses": "",
		"port":             "5432",
		"max_connections":  "200",
		"shared_buffers":   "256MB",
		"fsync":            "on",
		"server_encoding":  "UTF8",
	}
	for name, want := range settings {
		var got string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	var user string
	if err := conn.QueryRow(ctx, "SELECT current_user").Scan(&user); err != nil || user != "postgres" {
		t.Errorf("current_user = %q, %v; want postgres", user, err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('survives')"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := pgx.Connect(ctx, c.ConnString("postgres")); err == nil {
		t.Fatal("connected after Stop")
	}

	c2 := startCluster(t, ctx, dir)
	conn2 := connect(t, ctx, c2)
	var v string
	if err := conn2.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != "survives" {
		t.Fatalf("after restart: v = %q, %v; want survives", v, err)
	}
	log, err := os.ReadFile(filepath.Join(dir, "postgresql.log"))
	if err != nil || !strings.Contains(string(log), "database system is ready to accept connections") {
		t.Errorf("server log in the data dir lacks the ready line (err %v)", err)
	}
}

func TestSecondStartOnRunningClusterFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := tempDataDir(t)
	c := startCluster(t, ctx, dir)

	c2, err := Start(ctx, Options{DataDir: dir, Logger: testLogger(t)})
	if err == nil {
		c2.Stop()
		t.Fatal("second Start on a running cluster succeeded")
	}
	if !strings.Contains(err.Error(), "already running") || !errors.Is(err, ErrInUse) {
		t.Errorf("error %q does not say the server is already running, or does not wrap ErrInUse", err)
	}
	// The failed Start must leave the first server alone, and a second process reaches it
	// through the data directory alone.
	if got, want := DataDirConnString(dir, "postgres"), c.ConnString("postgres"); got != want {
		t.Errorf("DataDirConnString = %s, want the running cluster's %s", got, want)
	}
	conn := connect(t, ctx, c)
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("first cluster broken after a refused second Start: %d, %v", one, err)
	}
}

func TestStalePidFileIsIgnored(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := tempDataDir(t)
	c := startCluster(t, ctx, dir)
	pidFile := filepath.Join(dir, "pgdata", "postmaster.pid")
	pid, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	// Where PID 1 reaps orphans lazily the old postmaster lingers as a zombie, which still
	// counts as alive; a real crash leaves a stale file only once the process is gone.
	waitGone(t, strings.SplitN(string(pid), "\n", 2)[0])
	// Put back the pid file as a crash would have left it, naming a postmaster that is gone.
	if err := os.WriteFile(pidFile, pid, 0o600); err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if err := os.Chown(pidFile, int(st.Uid), int(st.Gid)); err != nil {
		t.Fatal(err)
	}

	c2 := startCluster(t, ctx, dir)
	conn := connect(t, ctx, c2)
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("after a stale pid file: %d, %v", one, err)
	}
}

func TestSocketPathTooLong(t *testing.T) {
	dir := filepath.Join("/tmp", strings.Repeat("q", 100))
	_, err := Start(context.Background(), Options{DataDir: dir})
	if err == nil || !strings.Contains(err.Error(), "QUEEN_DATA_DIR") {
		t.Fatalf("Start with a %d-byte socket path: err = %v, want one naming QUEEN_DATA_DIR", len(dir)+len("/run/.s.PGSQL.5432"), err)
	}
	if _, statErr := os.Stat(dir); statErr == nil {
		os.RemoveAll(dir)
		t.Error("Start created the data directory before refusing it")
	}
}

func TestUnreachableDataDirAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root hands the cluster to another user")
	}
	parent := tempDataDir(t)
	if err := os.Chmod(parent, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := Start(context.Background(), Options{DataDir: filepath.Join(parent, "data")})
	if err == nil {
		t.Fatal("Start below a 0700 root directory succeeded")
	}
	for _, want := range []string{parent, "QUEEN_DATA_DIR", "/var/lib/queen"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestConnStringQuoting(t *testing.T) {
	c := &Cluster{runDir: "/tmp/it's here"}
	got := c.ConnString("my db")
	want := `host='/tmp/it\'s here' port=5432 user=postgres dbname='my db' sslmode=disable`
	if got != want {
		t.Fatalf("ConnString = %s, want %s", got, want)
	}
	cfg, err := pgx.ParseConfig(got)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "/tmp/it's here" || cfg.Database != "my db" || cfg.User != "postgres" || cfg.Port != 5432 {
		t.Fatalf("parsed back as host %q db %q user %q port %d", cfg.Host, cfg.Database, cfg.User, cfg.Port)
	}
}

// waitGone re-checks on a ticker until process pid no longer exists. Nothing signals its
// reaping to this process (it is not the parent), so /proc is all there is to watch.
func waitGone(t *testing.T, pid string) {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat("/proc/" + pid); os.IsNotExist(err) {
			return
		}
		select {
		case <-deadline.C:
			t.Skipf("postmaster %s still not reaped after 30s", pid)
		case <-tick.C:
		}
	}
}

func TestServerLeftByDeadOwnerIsRestarted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := tempDataDir(t)
	c := startCluster(t, ctx, dir)
	conn := connect(t, ctx, c)
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('survives')"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	// What a crash of the owning process does: its lock goes, its server keeps running.
	c.unlock()
	c.stopped = true

	c2 := startCluster(t, ctx, dir)
	conn2 := connect(t, ctx, c2)
	var v string
	if err := conn2.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != "survives" {
		t.Fatalf("after taking over: v = %q, %v; want survives", v, err)
	}
	// And the new owner is protected in turn.
	if c3, err := Start(ctx, Options{DataDir: dir, Logger: testLogger(t)}); err == nil {
		c3.Stop()
		t.Fatal("Start succeeded while the cluster has a live owner")
	} else if !strings.Contains(err.Error(), fmt.Sprint(os.Getpid())) {
		t.Errorf("error %q does not name the owner pid %d", err, os.Getpid())
	}
}

// A standby copied from a primary with synchronous replication holds every commit the primary
// acknowledged: after the primary is killed and the standby promoted, the rows are there and
// the standby takes writes, which it refused while it was one.
func TestStandbyPromotedAfterKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary, err := Start(ctx, Options{DataDir: tempDataDir(t), Logger: testLogger(t),
		Settings: map[string]string{"synchronous_standby_names": "'*'", "synchronous_commit": "on"}})
	if err != nil {
		t.Fatalf("Start primary: %v", err)
	}
	t.Cleanup(func() { primary.Stop() })
	standby, err := Start(ctx, Options{DataDir: tempDataDir(t), Logger: testLogger(t), Standby: primary})
	if err != nil {
		t.Fatalf("Start standby: %v", err)
	}
	t.Cleanup(func() { standby.Stop() })

	// Each commit waits for the standby to have it on disk.
	pc := connect(t, ctx, primary)
	if _, err := pc.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept SELECT generate_series(1, 100)"); err != nil {
		t.Fatal(err)
	}
	var state string
	if err := pc.QueryRow(ctx, "SELECT sync_state FROM pg_stat_replication").Scan(&state); err != nil || state != "sync" {
		t.Fatalf("replication state %q, %v; want one synchronous standby", state, err)
	}
	sc := connect(t, ctx, standby)
	if _, err := sc.Exec(ctx, "INSERT INTO kept VALUES (0)"); err == nil || !strings.Contains(err.Error(), "25006") {
		t.Fatalf("a write on the standby: %v, want SQLSTATE 25006", err)
	}
	sc.Close(ctx)

	pid, err := os.ReadFile(filepath.Join(primary.pgdata, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	if err := primary.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if st, ok := procStat(atoi(t, strings.SplitN(string(pid), "\n", 2)[0])); ok && st.state != 'Z' {
		t.Fatalf("the postmaster is still there after Kill: state %c", st.state)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatalf("Promote: %v", err)
	}
	sc = connect(t, ctx, standby)
	var n int
	if err := sc.QueryRow(ctx, "SELECT count(*) FROM kept").Scan(&n); err != nil || n != 100 {
		t.Fatalf("rows on the promoted standby: %d, %v; want 100", n, err)
	}
	if _, err := sc.Exec(ctx, "INSERT INTO kept VALUES (101)"); err != nil {
		t.Fatalf("a write on the promoted standby: %v", err)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

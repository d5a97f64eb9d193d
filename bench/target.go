package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"queen/persistence/localpg"
)

// Target is a broker under test, reached directly or through a front door (a TLS proxy that
// wants an API key), and what the bench knows about it.
type Target struct {
	URL       string         // base URL, http:// or https://host:port
	Token     string         // sent as a bearer token on every request; "" for none
	RootCAs   *x509.CertPool // https: the CAs its certificate may be signed by; nil: the system's
	BrokerPID int            // 0: not ours, no CPU/RSS figures
	PGPID     int            // postmaster pid, 0: unknown
	PGConn    string         // PostgreSQL behind the broker, for ceiling; "" when unknown
	// Native is set when /health names this project's broker: it exposes the parked-pop gauge
	// live, which the wake scenario polls instead of sleeping. A front door that answers
	// /health itself hides the broker: the bench then measures through the HTTP API alone.
	Native bool
	// MetricsErr is why the bench cannot read a Native broker's /metrics/prometheus, nil when
	// it can: a front door that forwards /health may keep the metrics to its operators. Wake
	// then sleeps for a pop to park, as for a target that is not Native, and scrape is skipped.
	MetricsErr error
	LogPath    string // broker log, scanned for errors after each scenario; "" when not ours
	// PG is the PostgreSQL behind the broker when the bench started it itself, so that the
	// outage scenario can stop and start it; nil otherwise.
	PG *benchPG

	once sync.Once
	c    *client
	err  error
}

func (t *Target) client() (*client, error) {
	t.once.Do(func() { t.c, t.err = newClient(t.URL, t.Token, t.RootCAs) })
	return t.c, t.err
}

// probe checks that the target answers and takes the bench's credentials, and whether /health
// names this project's broker. A front door may answer /health itself, or not route it (404):
// the target is then not Native. Since such a /health may need no key, the credentials are
// checked on an API route too (a queue nobody made: the broker answers 404), so that a missing
// or wrong key stops the run here rather than failing every request of a scenario. A Native
// target's metrics page is read once, to learn whether the bench may read it at all.
func (t *Target) probe() error {
	c, err := t.client()
	if err != nil {
		return err
	}
	cn := c.conn()
	b, err := cn.do("GET", "/health", nil)
	switch {
	case err == nil:
		t.Native = t.Native || bytes.Contains(b, []byte(`"server":"Queen Go broker"`))
	case !hasStatus(err, 404):
		return t.unreachable(err)
	}
	var he *errHTTP
	if _, err := cn.do("GET", "/api/v1/resources/queues/"+freshQueue("probe"), nil); err != nil && (isRefusal(err) || !errors.As(err, &he)) {
		return t.unreachable(err)
	}
	if t.Native {
		_, t.MetricsErr = cn.do("GET", "/metrics/prometheus", nil)
	}
	return nil
}

// isRefusal reports an answer that turns the bench's credentials down.
func isRefusal(err error) bool { return hasStatus(err, 401) || hasStatus(err, 403) }

// unreachable is the probe's error, with a hint where the answer was a refusal.
func (t *Target) unreachable(err error) error {
	if isRefusal(err) {
		return fmt.Errorf("the broker at %s refused the bench's request (%w): give its API key with --token or QUEEN_BENCH_TOKEN (--vs-token or QUEEN_BENCH_VS_TOKEN for --vs)", t.URL, err)
	}
	return fmt.Errorf("cannot reach the broker at %s: %w", t.URL, err)
}

// checkpoint flushes PostgreSQL's dirty buffers between scenarios, so that one scenario's
// writes are not checkpointed during the next one's measurement.
func (t *Target) checkpoint(ctx context.Context) {
	if t.PGConn == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, t.PGConn)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "CHECKPOINT")
}

// logOffset is the current size of the broker log.
func (t *Target) logOffset() int64 {
	if t.LogPath == "" {
		return 0
	}
	fi, err := os.Stat(t.LogPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logErrors returns the ERROR lines the broker logged since offset.
func (t *Target) logErrors(offset int64) []string {
	if t.LogPath == "" {
		return nil
	}
	f, err := os.Open(t.LogPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil
	}
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.Contains(line, "level=ERROR") {
			out = append(out, line)
		}
	}
	return out
}

// benchPG is a PostgreSQL the bench runs itself (persistence/localpg), under a broker it
// points there with PG_HOST: unlike the broker's own, the bench can stop and start it.
type benchPG struct {
	dir  string
	log  *slog.Logger
	conn string // conn string of the postgres database, the same across restarts

	mu sync.Mutex
	c  *localpg.Cluster // nil while stopped
}

// startPG creates (first time) and starts a PostgreSQL in dir, which must be enterable by the
// server's user when we are root.
func startPG(ctx context.Context, dir string) (*benchPG, error) {
	p := &benchPG{dir: dir, log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if err := p.start(ctx); err != nil {
		return nil, err
	}
	p.conn = p.c.ConnString("postgres")
	return p, nil
}

// start starts the server again after stop; the data directory is kept.
func (p *benchPG) start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.c != nil {
		return nil
	}
	c, err := localpg.Start(ctx, localpg.Options{DataDir: p.dir, Logger: p.log})
	if err != nil {
		return fmt.Errorf("cannot start the bench's PostgreSQL: %w", err)
	}
	p.c = c
	return nil
}

// stop shuts the server down (fast: open transactions roll back, clients are disconnected).
func (p *benchPG) stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.c == nil {
		return nil
	}
	if err := p.c.Stop(); err != nil {
		return fmt.Errorf("cannot stop the bench's PostgreSQL: %w", err)
	}
	p.c = nil
	return nil
}

// brokerProcess is a broker the bench built and started.
type brokerProcess struct {
	dir    string
	cmd    *exec.Cmd
	exited chan error // the broker's exit status, once
	t      *Target
	pg     *benchPG // the bench's PostgreSQL behind it, if any; stopped after the broker
}

// startBroker builds ./cmd/queen and runs it with its own local PostgreSQL in a temporary
// directory, on a free port, and waits until /health answers 200. With ownPG the bench runs
// that PostgreSQL itself and the broker reaches it through PG_HOST, so the outage scenario can
// stop and start it.
func startBroker(ctx context.Context, env []string, ownPG bool) (*brokerProcess, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	// Under /tmp, not os.TempDir: when we are root PostgreSQL runs as another user, which must
	// be able to enter every parent directory, and the socket path must stay short.
	dir, err := os.MkdirTemp("/tmp", "queen-bench-")
	if err != nil {
		return nil, fmt.Errorf("cannot create a directory for the broker: %w", err)
	}
	p := &brokerProcess{dir: dir}
	ok := false
	defer func() {
		if !ok {
			p.stop()
		}
	}()
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot open %s to the PostgreSQL user: %w", dir, err)
	}
	bin := filepath.Join(dir, "queen")
	build := exec.CommandContext(ctx, goBinary(), "build", "-o", bin, "./cmd/queen")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("cannot build ./cmd/queen: %w: %s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "broker.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("cannot create the broker log: %w", err)
	}
	defer logFile.Close()
	dataDir := filepath.Join(dir, "data")
	cmd := exec.Command(bin)
	cmd.Dir = dir
	// The broker's own environment: nothing of ours that would point it at another
	// PostgreSQL, data directory or port.
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "QUEEN_") || strings.HasPrefix(k, "DB_") ||
			k == "PORT" || k == "HOST" || k == "LOG_LEVEL" {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, "QUEEN_DATA_DIR="+dataDir, "PORT="+strconv.Itoa(port),
		"QUEEN_BIND_ADDR=127.0.0.1", "LOG_LEVEL=warn")
	pgConn := fmt.Sprintf("host=%s port=5432 user=postgres dbname=postgres sslmode=disable", filepath.Join(dataDir, "run"))
	if ownPG {
		if p.pg, err = startPG(ctx, filepath.Join(dir, "pg")); err != nil {
			return nil, err
		}
		pgConn = p.pg.conn
		cmd.Env = append(cmd.Env, "PG_HOST="+filepath.Join(dir, "pg", "run"), "PG_PORT=5432", "PG_USER=postgres", "PG_DB=postgres")
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so a ^C at the terminal reaches only the bench, which then stops
	// the broker in order; and SIGTERM if the bench dies without doing so.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cannot start the broker: %w", err)
	}
	p.cmd = cmd
	exited := make(chan error, 1)
	p.exited = exited
	go func() { exited <- cmd.Wait() }()

	t := &Target{URL: fmt.Sprintf("http://127.0.0.1:%d", port), BrokerPID: cmd.Process.Pid, LogPath: logPath, Native: true,
		PGConn: pgConn, PG: p.pg}
	p.t = t
	deadline := time.Now().Add(3 * time.Minute) // a first start runs initdb
	for {
		if err := t.probe(); err == nil {
			break
		}
		select {
		case err := <-exited:
			p.cmd = nil
			return nil, fmt.Errorf("the broker exited during startup (%v): %s", err, tailFile(logPath))
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the broker did not answer /health within 3 minutes: %s", tailFile(logPath))
		}
	}
	if !ownPG {
		// The bench's own is restarted by the outage scenario: no CPU figure across that.
		t.PGPID = postmasterPID(filepath.Join(dataDir, "pgdata"))
	}
	ok = true
	return p, nil
}

// stop sends SIGTERM and waits for the broker's orderly shutdown (which stops its PostgreSQL),
// then removes the directory. It returns the broker's log errors, if any, for the report.
func (p *brokerProcess) stop() error {
	var err error
	if p.cmd != nil && p.cmd.Process != nil {
		pgPID := 0
		if p.t != nil {
			pgPID = p.t.PGPID
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case werr := <-p.exited:
			if werr != nil {
				err = fmt.Errorf("the broker exited with %v after SIGTERM: %s", werr, tailFile(filepath.Join(p.dir, "broker.log")))
			}
		case <-time.After(60 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
			err = errors.New("the broker did not stop within 60 s of SIGTERM; killed")
		}
		// A broker that did not stop its PostgreSQL leaves it running: fast shutdown.
		if pgPID > 0 && processAlive(pgPID) {
			_ = syscall.Kill(pgPID, syscall.SIGINT)
			for i := 0; i < 100 && processAlive(pgPID); i++ {
				time.Sleep(100 * time.Millisecond)
			}
			if err == nil {
				err = errors.New("the broker left its PostgreSQL running after shutdown")
			}
		}
	}
	if p.pg != nil {
		if perr := p.pg.stop(); perr != nil && err == nil {
			err = perr
		}
	}
	if rerr := os.RemoveAll(p.dir); rerr != nil && err == nil {
		err = fmt.Errorf("cannot remove %s: %w", p.dir, rerr)
	}
	return err
}

// processAlive reports whether pid runs and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z'
}

func tailFile(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// moduleRoot finds the directory of the queen module's go.mod, from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("cannot get the working directory: %w", err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte("module queen\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the queen module (go.mod) above the working directory: run the bench from the repository")
		}
		dir = parent
	}
}

func goBinary() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"

}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("cannot find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

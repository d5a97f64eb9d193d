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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"queen/pg/localpg"
)

// Target is a broker under test, reached directly or through a front door (a TLS proxy that
// wants an API key), and what the bench knows about it.
type Target struct {
	URL       string         // base URL, http:// or https://host:port
	Token     string         // sent as a bearer token on every request; "" for none
	RootCAs   *x509.CertPool // https: the CAs its certificate may be signed by; nil: the system's
	BrokerPID int            // 0: not ours, no CPU/RSS figures
	// MoreBrokerPIDs are the other brokers on the same PostgreSQL that the bench started with
	// this one: their CPU counts with this broker's, as the load is spread over all of them.
	MoreBrokerPIDs []int
	PGPID          int    // postmaster pid, 0: unknown
	PGConn         string // PostgreSQL behind the broker, for ceiling; "" when unknown
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
	// Process is the broker when the bench started it, so that the soak can restart it.
	Process *brokerProcess

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

// benchPG is a PostgreSQL the bench runs itself (pg/localpg), under a broker it
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

// brokerProcess is one broker the bench built and started, with what a restart needs.
type brokerProcess struct {
	bin, dir, logPath string
	env               []string
	proc              *child // nil when not running
	pid               atomic.Int64
	t                 *Target
}

// brokerSet is what the bench started in a temporary directory: the brokers and, when the bench
// runs it itself, the PostgreSQL they share.
type brokerSet struct {
	dir     string
	brokers []*brokerProcess
	pg      *benchPG // nil: the one broker runs its own; stopped after the brokers
	t       *Target  // the first broker
}

// startBrokers builds ./cmd/queen, of the working tree or of revision rev when not "", and runs n brokers in a temporary directory, each on a free
// port, and waits until each /health answers 200. One broker without ownPG runs its own local
// PostgreSQL. With ownPG, or more than one broker, the bench runs that PostgreSQL itself and the
// brokers reach it through PG_HOST, so the outage and soak scenarios can stop and start it;
// several brokers are each other's mesh peers, as in a deployment. The first broker's Target
// counts the others' CPU with its own.
func startBrokers(ctx context.Context, rev string, env []string, ownPG bool, n int) (*brokerSet, error) {
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
	s := &brokerSet{dir: dir}
	ok := false
	defer func() {
		if !ok {
			s.stop()
		}
	}()
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot open %s to the PostgreSQL user: %w", dir, err)
	}
	if rev != "" {
		if root, err = checkout(ctx, root, rev, filepath.Join(dir, "src")); err != nil {
			return nil, err
		}
	}
	bin := filepath.Join(dir, "queen")
	build := exec.CommandContext(ctx, goBinary(), "build", "-o", bin, "./cmd/queen")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("cannot build ./cmd/queen in %s: %w: %s", root, err, out)
	}
	// The brokers' own environment: nothing of ours that would point them at another
	// PostgreSQL, data directory or port.
	var base []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "QUEEN_") || strings.HasPrefix(k, "DB_") ||
			k == "PORT" || k == "HOST" || k == "LOG_LEVEL" {
			continue
		}
		base = append(base, kv)
	}
	base = append(base, "QUEEN_BIND_ADDR=127.0.0.1", "LOG_LEVEL=warn")
	pgConn := fmt.Sprintf("host=%s port=5432 user=postgres dbname=postgres sslmode=disable", filepath.Join(dir, "data", "run"))
	pgData := filepath.Join(dir, "data", "pgdata")
	if ownPG || n > 1 {
		if s.pg, err = startPG(ctx, filepath.Join(dir, "pg")); err != nil {
			return nil, err
		}
		pgConn, pgData = s.pg.conn, filepath.Join(dir, "pg", "pgdata")
		base = append(base, "PG_HOST="+filepath.Join(dir, "pg", "run"), "PG_PORT=5432", "PG_USER=postgres", "PG_DB=postgres")
	}
	ports := make([]int, n)
	var peers []string
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
		if n > 1 {
			mp, err := freePort()
			if err != nil {
				return nil, err
			}
			peers = append(peers, "127.0.0.1:"+strconv.Itoa(mp))
		}
	}
	for i, port := range ports {
		name := "broker"
		if i > 0 {
			name += strconv.Itoa(i + 1)
		}
		b := &brokerProcess{bin: bin, dir: dir, logPath: filepath.Join(dir, name+".log")}
		b.env = append(slices.Clone(base), "QUEEN_DATA_DIR="+filepath.Join(dir, strings.Replace(name, "broker", "data", 1)), "PORT="+strconv.Itoa(port))
		if n > 1 {
			_, mp, _ := strings.Cut(peers[i], ":")
			b.env = append(b.env, "QUEEN_MESH_PORT="+mp, "QUEEN_MESH_PEERS="+strings.Join(peers, ","), "QUEEN_SERVER_ID=bench-"+name)
		}
		b.env = append(b.env, env...)
		b.t = &Target{URL: fmt.Sprintf("http://127.0.0.1:%d", port), LogPath: b.logPath, Native: true, PGConn: pgConn, PG: s.pg, Process: b}
		if err := b.start(ctx); err != nil {
			return nil, err
		}
		b.t.BrokerPID = int(b.pid.Load())
		s.brokers = append(s.brokers, b)
		// A broker running its own PostgreSQL has started it by now.
		b.t.PGPID = postmasterPID(pgData)
	}
	s.t = s.brokers[0].t
	for _, b := range s.brokers[1:] {
		s.t.MoreBrokerPIDs = append(s.t.MoreBrokerPIDs, b.t.BrokerPID)
	}
	ok = true
	return s, nil
}

// checkout writes the tree of revision rev of the repository at root into dir (git archive,
// which leaves the repository's worktrees and index alone) and returns dir.
func checkout(ctx context.Context, root, rev, dir string) (string, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("cannot create %s: %w", dir, err)
	}
	tarball := dir + ".tar"
	for _, args := range [][]string{{"git", "-C", root, "archive", "-o", tarball, rev}, {"tar", "-xf", tarball, "-C", dir}} {
		if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("cannot check out %s: %s: %w: %s", rev, strings.Join(args, " "), err, out)
		}
	}
	return dir, nil
}

// start runs the broker and waits until /health answers.
func (b *brokerProcess) start(ctx context.Context) error {
	err := startChild(ctx, childSpec{name: "the broker", bin: b.bin, dir: b.dir, logPath: b.logPath, env: b.env,
		deathSig: syscall.SIGTERM, within: 3 * time.Minute, // a first start runs initdb
		started: func(c *child) {
			b.proc = c
			b.pid.Store(int64(c.cmd.Process.Pid))
		},
		ready: func() bool { return b.t.probe() == nil }})
	if err != nil && b.proc != nil {
		select {
		case <-b.proc.done:
			b.proc = nil // exited during startup: nothing left to stop
		default:
		}
	}
	return err
}

// stop sends SIGTERM and waits for the broker's orderly shutdown (which stops its own
// PostgreSQL, if it runs one).
func (b *brokerProcess) stop() error {
	c := b.proc
	if c == nil {
		return nil
	}
	b.proc = nil
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		if c.err != nil {
			return fmt.Errorf("the broker exited with %v after SIGTERM: %s", c.err, tailFile(b.logPath))
		}
		return nil
	case <-time.After(60 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
		return errors.New("the broker did not stop within 60 s of SIGTERM; killed")
	}
}

// restart stops the broker in order and starts it again on the same port and data directory.
// The Target keeps the first start's pid: read pid for the current one.
func (b *brokerProcess) restart(ctx context.Context) error {
	if err := b.stop(); err != nil {
		return err
	}
	return b.start(ctx)
}

// stop stops the brokers, then the PostgreSQL, then removes the directory. It returns the
// first error, if any, for the report.
func (s *brokerSet) stop() error {
	var err error
	keep := func(e error) {
		if err == nil {
			err = e
		}
	}
	for _, b := range s.brokers {
		keep(b.stop())
	}
	// A broker that did not stop its own PostgreSQL leaves it running: fast shutdown.
	if s.pg == nil && s.t != nil && s.t.PGPID > 0 && processAlive(s.t.PGPID) {
		pgPID := s.t.PGPID
		_ = syscall.Kill(pgPID, syscall.SIGINT)
		for i := 0; i < 100 && processAlive(pgPID); i++ {
			time.Sleep(100 * time.Millisecond)
		}
		// The broker's log says whether it tried to stop it (pg_ctl's error) or not.
		keep(fmt.Errorf("the broker left its PostgreSQL running after shutdown: %s", tailFile(s.t.LogPath)))
	}
	if s.pg != nil {
		keep(s.pg.stop())
	}
	if rerr := os.RemoveAll(s.dir); rerr != nil {
		keep(fmt.Errorf("cannot remove %s: %w", s.dir, rerr))
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

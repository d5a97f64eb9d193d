// Package localpg runs a private PostgreSQL cluster from the binaries installed on the machine,
// so the broker and its tests work without a database server set up beforehand.
package localpg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Options configures Start.
type Options struct {
	DataDir string       // cluster lives in DataDir/pgdata; the unix socket in DataDir/run
	Logger  *slog.Logger // nil means slog.Default()

	// The rest is for tests that need a server reachable over TCP (PostgreSQL TLS).
	//
	// TCPPort, when not 0, makes the server listen on 127.0.0.1 at that port as well as on its
	// unix socket (whose name carries the same port number).
	TCPPort int
	// Settings are extra postgresql.conf lines, name = value (the value written as given, so a
	// string needs its single quotes), e.g. "ssl": "on".
	Settings map[string]string
	// Files are written into DataDir/pgdata before the server starts, readable by the server's
	// user only: certificates and keys a setting names (relative paths there are resolved
	// against the data directory), or a pg_hba.conf replacing the one initdb wrote.
	Files map[string][]byte
	// Standby, when set, makes a new data directory a streaming standby of that running
	// cluster instead of an empty cluster (see standby.go); Promote makes it a primary.
	Standby *Cluster
}

// Cluster is a running server started by Start.
type Cluster struct {
	dataDir string
	pgdata  string
	runDir  string
	binDir  string
	cred    *syscall.Credential // nil when we are not root and run the binaries as ourselves
	user    string              // the name behind cred
	log     *slog.Logger
	lock    *os.File // flock held while the server is ours
	port    int      // the socket's (and TCPPort's) port number
	tcp     bool
	extra   map[string]string
	files   map[string][]byte
	primary *Cluster // the cluster a standby was copied from; nil for a primary

	mu      sync.Mutex
	stopped bool
	frozen  []int // the processes Freeze stopped, postmaster first
}

const defaultPort = 5432

// ErrInUse is what Start's error wraps when a live process already runs the cluster of the data
// directory: another process of the same program then reaches that server through
// DataDirConnString instead of starting its own.
var ErrInUse = errors.New("the data directory is in use")

// maxSocketPath is sizeof(sockaddr_un.sun_path) minus the terminating NUL.
const maxSocketPath = 107

// Start initialises the cluster if needed and starts the server, listening on a unix socket only.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.DataDir == "" {
		return nil, errors.New("localpg: no data directory given")
	}
	dataDir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("cannot resolve data directory %s: %w", opts.DataDir, err)
	}
	c := &Cluster{
		dataDir: dataDir,
		pgdata:  filepath.Join(dataDir, "pgdata"),
		runDir:  filepath.Join(dataDir, "run"), // DataDirConnString knows this name
		log:     opts.Logger,
		port:    defaultPort,
		extra:   opts.Settings,
		files:   opts.Files,
		primary: opts.Standby,
	}
	if opts.TCPPort != 0 {
		c.port, c.tcp = opts.TCPPort, true
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if sock := filepath.Join(c.runDir, fmt.Sprintf(".s.PGSQL.%d", c.port)); len(sock) > maxSocketPath {
		return nil, fmt.Errorf("the postgresql socket path %s is %d bytes, more than the %d unix sockets allow: set QUEEN_DATA_DIR to a shorter directory such as /var/lib/queen or /tmp/queen",
			sock, len(sock), maxSocketPath)
	}

	dataVersion := readPGVersion(c.pgdata)
	if c.primary != nil && dataVersion == "" {
		c.binDir = c.primary.binDir // a copy runs on the primary's version
	} else if c.binDir, err = findBinDir(dataVersion); err != nil {
		return nil, err
	}

	// PostgreSQL refuses to run as root, so a root broker hands the cluster to an unprivileged user.
	if os.Geteuid() == 0 {
		if c.user, c.cred, err = unprivilegedUser(); err != nil {
			return nil, err
		}
	}
	if err := c.prepareDirs(); err != nil {
		return nil, err
	}

	if err := c.lockDataDir(); err != nil {
		return nil, err
	}
	version, err := c.boot(ctx, dataVersion)
	if err != nil {
		c.unlock()
		return nil, err
	}
	c.log.Info("local postgresql started", "data_dir", c.dataDir, "socket_dir", c.runDir, "version", version)
	return c, nil
}

// boot does the part of Start that needs the data directory lock, and returns the server version.
func (c *Cluster) boot(ctx context.Context, dataVersion string) (string, error) {
	out, err := c.run(ctx, "postgres", "--version")
	if err != nil {
		return "", fmt.Errorf("cannot run %s: %w: %s", filepath.Join(c.binDir, "postgres"), err, tail(out))
	}
	version := strings.TrimPrefix(strings.TrimSpace(string(out)), "postgres (PostgreSQL) ")
	if dataVersion != "" && majorOf(version) != dataVersion {
		return "", fmt.Errorf("the cluster in %s was created by PostgreSQL %s but the server found is %s: install PostgreSQL %s or move the data directory away",
			c.pgdata, dataVersion, version, dataVersion)
	}
	if dataVersion == "" {
		create := c.initdb
		if c.primary != nil {
			create = c.basebackup
		}
		if err := create(ctx); err != nil {
			return "", err
		}
	}
	if err := c.writeConfig(); err != nil {
		return "", err
	}
	// pg_ctl status exits 0 only when postmaster.pid names a live process; a stale pid file
	// left by a crashed server gives 3 and pg_ctl start copes with it. A live server although
	// we hold the lock was left by a broker that crashed: pg_ctl start puts the server in the
	// background, so it outlives its broker.
	if _, err := c.run(ctx, "pg_ctl", "status", "-D", c.pgdata); err == nil {
		c.log.Warn("stopping the postgresql server left running by a previous process", "data_dir", c.dataDir)
		if out, err := c.run(ctx, "pg_ctl", "stop", "-D", c.pgdata, "-m", "fast", "-w"); err != nil {
			return "", fmt.Errorf("cannot stop the postgresql server left running in %s: %w: %s", c.pgdata, err, tail(out))
		}
	}
	return version, c.start(ctx)
}

// SocketDir is the directory holding the server's unix socket, the host of a libpq conn string.
func (c *Cluster) SocketDir() string { return c.runDir }

// ConnString returns a keyword/value conn string for database db as the superuser.
func (c *Cluster) ConnString(db string) string {
	port := c.port
	if port == 0 {
		port = defaultPort
	}
	return connString(c.runDir, port, db)
}

// DataDirConnString returns the conn string of database db on the cluster that a process
// started in dataDir (absolute) without TCPPort: how a second process reaches it when Start
// says ErrInUse.
func DataDirConnString(dataDir, db string) string {
	return connString(filepath.Join(dataDir, "run"), defaultPort, db)
}

func connString(runDir string, port int, db string) string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=%s sslmode=disable", quoteConnValue(runDir), port, quoteConnValue(db))
}

// Stop shuts the server down, rolling back open transactions. Calling it again after it
// succeeded does nothing.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	out, err := c.run(context.Background(), "pg_ctl", "stop", "-D", c.pgdata, "-m", "fast", "-w")
	if err != nil {
		return fmt.Errorf("cannot stop postgresql in %s: %w: %s", c.pgdata, err, tail(out))
	}
	c.stopped = true
	c.unlock()
	return nil
}

// lockDataDir takes an flock on DataDir/localpg.lock for as long as the cluster runs. The
// kernel drops it when the process dies, which tells a live owner from a crashed one.
func (c *Cluster) lockDataDir() error {
	path := filepath.Join(c.dataDir, "localpg.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("cannot open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		owner, _ := io.ReadAll(f)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("a postgresql server is already running on %s, started by process %s which is still alive (another broker?): stop it or use another data directory: %w",
				c.pgdata, strings.TrimSpace(string(owner)), ErrInUse)
		}
		return fmt.Errorf("cannot lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = fmt.Fprintf(f, "%d\n", os.Getpid())
	}
	c.lock = f
	return nil
}

func (c *Cluster) unlock() {
	if c.lock != nil {
		c.lock.Close()
		c.lock = nil
	}
}

// quoteConnValue quotes a value for a keyword/value conn string when it needs it.
func quoteConnValue(v string) string {
	if v != "" && !strings.ContainsAny(v, ` '\`+"\t\n\r") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

func (c *Cluster) prepareDirs() error {
	// Parents we create must stay enterable by the cluster's user.
	if err := os.MkdirAll(filepath.Dir(c.dataDir), 0o755); err != nil {
		return fmt.Errorf("cannot create %s: %w", filepath.Dir(c.dataDir), err)
	}
	for _, d := range []string{c.dataDir, c.pgdata, c.runDir} {
		// 0700: local connections are trusted, so whoever reaches the socket is superuser.
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("cannot create %s: %w", d, err)
		}
	}
	if c.cred == nil {
		return nil
	}
	if dir, ok := c.traversable(filepath.Dir(c.dataDir)); !ok {
		return fmt.Errorf("postgresql runs as user %s, which cannot enter %s (it needs o+x there), so it cannot reach %s: set QUEEN_DATA_DIR to a directory such as /var/lib/queen or /tmp/queen",
			c.user, dir, c.dataDir)
	}
	for _, d := range []string{c.dataDir, c.pgdata, c.runDir} {
		if err := os.Chown(d, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("cannot hand %s to user %s: %w", d, c.user, err)
		}
	}
	return nil
}

// traversable reports whether the unprivileged user can search every directory from / down to
// dir, and if not, one it cannot.
func (c *Cluster) traversable(dir string) (string, bool) {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return d, false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return "", true
		}
		var bit os.FileMode = 0o001
		switch {
		case st.Uid == c.cred.Uid:
			bit = 0o100
		case st.Gid == c.cred.Gid: // the only group: exec drops supplementary ones
			bit = 0o010
		}
		if fi.Mode().Perm()&bit == 0 {
			return d, false
		}
		if d == filepath.Dir(d) {
			return "", true
		}
	}
}

func (c *Cluster) initdb(ctx context.Context) error {
	out, err := c.run(ctx, "initdb", "-D", c.pgdata, "-U", "postgres",
		"--auth-local=trust", "--auth-host=reject", "--encoding=UTF8", "--locale=C")
	if err != nil {
		return fmt.Errorf("cannot initdb %s: %w: %s", c.pgdata, err, tail(out))
	}
	// The settings live in a file of their own, rewritten at every start so a moved data
	// directory gets its new socket path; ALTER SYSTEM still overrides them.
	f, err := os.OpenFile(filepath.Join(c.pgdata, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("cannot open postgresql.conf: %w", err)
	}
	_, err = f.WriteString("\ninclude_if_exists = 'queen.conf'\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cannot write postgresql.conf: %w", err)
	}
	return nil
}

func (c *Cluster) writeConfig() error {
	listen := ""
	if c.tcp {
		listen = "127.0.0.1"
	}
	conf := fmt.Sprintf(`# Written by queen at every start; use ALTER SYSTEM to override.
listen_addresses = '%s'
port = %d
unix_socket_directories = '%s'
max_connections = 200
shared_buffers = 256MB
fsync = on
`, listen, c.port, strings.ReplaceAll(c.runDir, "'", "''"))
	names := make([]string, 0, len(c.extra))
	for name := range c.extra {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		conf += name + " = " + c.extra[name] + "\n"
	}
	files := map[string][]byte{"queen.conf": []byte(conf)}
	for name, body := range c.files {
		files[name] = body
	}
	for name, body := range files {
		path := filepath.Join(c.pgdata, name)
		if err := os.WriteFile(path, body, 0o600); err != nil {
			return fmt.Errorf("cannot write %s: %w", path, err)
		}
		if c.cred != nil {
			if err := os.Chown(path, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
				return fmt.Errorf("cannot hand %s to user %s: %w", path, c.user, err)
			}
		}
	}
	return nil
}

func (c *Cluster) start(ctx context.Context) error {
	logFile := filepath.Join(c.dataDir, "postgresql.log")
	var logStart int64
	if fi, err := os.Stat(logFile); err == nil {
		logStart = fi.Size()
	}
	out, err := c.run(ctx, "pg_ctl", "start", "-w", "-t", "60", "-D", c.pgdata, "-l", logFile)
	if err == nil {
		return nil
	}
	// pg_ctl only says "examine the log output": the reason is in the server log.
	msg := tail(out)
	if f, ferr := os.Open(logFile); ferr == nil {
		if _, ferr := f.Seek(logStart, io.SeekStart); ferr == nil {
			if b, ferr := io.ReadAll(f); ferr == nil && len(b) > 0 {
				msg += "; server log: " + tail(b)
			}
		}
		f.Close()
	}
	return fmt.Errorf("cannot start postgresql in %s: %w: %s", c.pgdata, err, msg)
}

// run runs one of the PostgreSQL binaries as the cluster's user and returns its combined output.
func (c *Cluster) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, name), args...)
	// The binaries resolve relative paths and sometimes their own location from the working
	// directory, which must be one the cluster's user can enter.
	cmd.Dir = c.dataDir
	// PGPORT, PGDATA and friends in our environment would steer pg_ctl away from this cluster.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "LC_ALL=C")
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return out.Bytes(), err
}

// ServerUser is the account a PostgreSQL server started by this process runs under: the
// process's own (nil credential), or an unprivileged one when it runs as root.
func ServerUser() (string, *syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return "", nil, nil
	}
	return unprivilegedUser()
}

// BinDir finds the newest installed PostgreSQL's binaries (see findBinDir).
func BinDir() (string, error) { return findBinDir("") }

// unprivilegedUser picks the account the server runs under when we are root.
func unprivilegedUser() (string, *syscall.Credential, error) {
	var errs []error
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err := errors.Join(err1, err2); err != nil {
			return "", nil, fmt.Errorf("user %s: %w", name, err)
		}
		return name, &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return "", nil, fmt.Errorf("running as root and found no user to run postgresql as: %w", errors.Join(errs...))
}

// findBinDir finds a directory holding initdb, pg_ctl and postgres: first through PATH, then
// under /usr/lib/postgresql, where Debian keeps them off PATH, preferring the major version the
// data directory was created with, else the newest.
func findBinDir(dataVersion string) (string, error) {
	for _, name := range []string{"initdb", "pg_ctl"} {
		p, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		// Resolve symlinks so that all three binaries come from the same installation.
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if dir := filepath.Dir(p); hasBinaries(dir) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var best string
	bestVersion := -1.0
	for _, dir := range dirs {
		if !hasBinaries(dir) {
			continue
		}
		name := filepath.Base(filepath.Dir(dir))
		if name == dataVersion {
			return dir, nil
		}
		if v, err := strconv.ParseFloat(name, 64); err == nil && v > bestVersion {
			best, bestVersion = dir, v
		}
	}
	if best != "" {
		return best, nil
	}
	return "", errors.New("no postgresql server binaries found (initdb, pg_ctl and postgres on PATH or in /usr/lib/postgresql/*/bin): install PostgreSQL (e.g. `apt-get install postgresql`) or set PG_HOST to use an existing server")
}

func hasBinaries(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

func readPGVersion(pgdata string) string {
	b, err := os.ReadFile(filepath.Join(pgdata, "PG_VERSION"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// majorOf extracts "15" from "15.18 (Debian 15.18-0+deb12u1)".
func majorOf(version string) string {
	major, _, _ := strings.Cut(version, ".")
	return major
}

// tail keeps the last lines of a command's output, enough to show why it failed.
func tail(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return strings.Join(lines, "\n")
}

// Package patroni runs a PostgreSQL cluster managed by Patroni on loopback: a single-member etcd
// as Patroni's configuration store and three (or more) nodes with synchronous replication,
// each PostgreSQL listening on TCP. It is the deployment docs/operations.md describes under
// "Running on Patroni", started from Debian's patroni and etcd-server packages, for the failover
// tests and the chaos bench. Patroni, etcd and PostgreSQL run as the user the local clusters
// run as (localpg.ServerUser).
package patroni

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"queen/pg/localpg"
)

// Options configures Start.
type Options struct {
	Dir   string // everything lives under it: etcd's data, each node's data directory, the logs
	Nodes int    // 3 when 0
	Log   *slog.Logger
	// Timing of Patroni's loop, written into the cluster's dynamic configuration: the leader
	// key lives TTL seconds unless renewed, each node runs its loop every LoopWait seconds,
	// and a DCS or PostgreSQL call is retried for RetryTimeout seconds. Patroni requires
	// LoopWait + 2×RetryTimeout ≤ TTL. Zero values take DefaultTiming.
	Timing Timing
}

// Timing is Patroni's ttl, loop_wait and retry_timeout, in seconds.
type Timing struct{ TTL, LoopWait, RetryTimeout int }

// DefaultTiming is the fastest failover Patroni 3 accepts (its smallest ttl is 20 s) with a
// loop of two seconds.
var DefaultTiming = Timing{TTL: 20, LoopWait: 2, RetryTimeout: 9}

// Cluster is a running Patroni cluster.
type Cluster struct {
	dir      string
	log      *slog.Logger
	cred     *syscall.Credential
	password string // the superuser's, postgres
	timing   Timing
	etcd     *process
	etcdPort int
	Nodes    []*Node
}

// Node is one Patroni member: its PostgreSQL and its REST API.
type Node struct {
	Name    string
	PGPort  int
	APIPort int
	c       *Cluster
	dataDir string
	config  string

	mu   sync.Mutex
	proc *process // Patroni; nil while the node is down
}

// Member is a node as Patroni's /cluster reports it.
type Member struct {
	Name     string `json:"name"`
	Role     string `json:"role"`  // leader, sync_standby, replica
	State    string `json:"state"` // running, streaming, starting, stopped, ...
	Timeline int    `json:"timeline"`
	Port     int    `json:"port"`
}

// Start starts etcd and the nodes, and returns once Patroni reports a leader and a synchronous
// standby with every node running.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Timing == (Timing{}) {
		o.Timing = DefaultTiming
	}
	for _, bin := range []string{"patroni", "etcd"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("cannot find %s: install Debian's patroni and etcd-server packages (apt-get install patroni etcd-server): %w", bin, err)
		}
	}
	_, cred, err := localpg.ServerUser()
	if err != nil {
		return nil, err
	}
	binDir, err := localpg.BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("cannot resolve %s: %w", o.Dir, err)
	}
	ports, err := freePorts(2 + 2*o.Nodes)
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, log: o.Log, cred: cred, password: secret(), timing: o.Timing, etcdPort: ports[0]}
	if err := c.mkdir(dir); err != nil {
		return nil, err
	}
	c.etcd, err = c.spawn("etcd", "etcd", "--name", "dcs", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", url(ports[0]), "--advertise-client-urls", url(ports[0]),
		"--listen-peer-urls", url(ports[1]), "--initial-advertise-peer-urls", url(ports[1]),
		"--initial-cluster", "dcs="+url(ports[1]))
	if err != nil {
		return nil, err
	}
	replication := secret()
	for i := range o.Nodes {
		n := &Node{Name: "pg" + strconv.Itoa(i+1), PGPort: ports[2+2*i], APIPort: ports[3+2*i], c: c}
		n.dataDir = filepath.Join(dir, n.Name, "data")
		n.config = filepath.Join(dir, n.Name+".yml")
		if err := c.mkdir(filepath.Join(dir, n.Name)); err != nil {
			c.Stop()
			return nil, err
		}
		if err := c.writeConfig(n, binDir, replication); err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	for _, n := range c.Nodes {
		if err := n.Start(); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if err := c.WaitHealthy(ctx, ""); err != nil {
		c.Stop()
		return nil, err
	}
	c.log.Info("patroni cluster started", "dir", dir, "nodes", len(c.Nodes), "ttl", c.timing.TTL, "loop_wait", c.timing.LoopWait,
		"retry_timeout", c.timing.RetryTimeout)
	return c, nil
}

// config is a node's Patroni configuration, written as JSON (which YAML reads).
func (c *Cluster) writeConfig(n *Node, binDir, replication string) error {
	auth := func(user, password string) map[string]string {
		return map[string]string{"username": user, "password": password}
	}
	cfg := map[string]any{
		"scope": "queen",
		"name":  n.Name,
		"log":   map[string]any{"level": "INFO"},
		"restapi": map[string]any{
			"listen": hostPort(n.APIPort), "connect_address": hostPort(n.APIPort),
		},
		"etcd3": map[string]any{"hosts": []string{hostPort(c.etcdPort)}},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl": c.timing.TTL, "loop_wait": c.timing.LoopWait, "retry_timeout": c.timing.RetryTimeout,
				// A commit returns once the synchronous standby has it, and only that standby
				// may be promoted: a push answered queued survives the primary's loss.
				"synchronous_mode": true,
				// While etcd is unreachable the leader stays primary as long as it reaches
				// every other node's REST API, instead of demoting itself.
				"failsafe_mode": true,
				"postgresql": map[string]any{
					"use_pg_rewind": true,
					"parameters": map[string]any{
						"wal_log_hints": "on", "max_connections": 200, "wal_keep_size": "256MB",
					},
				},
			},
			"initdb": []any{map[string]string{"encoding": "UTF8"}, map[string]string{"locale": "C"}, "data-checksums"},
			"pg_hba": []string{
				"local all all trust",
				"host replication replicator 127.0.0.1/32 scram-sha-256",
				"host all all 127.0.0.1/32 scram-sha-256",
			},
		},
		"postgresql": map[string]any{
			"listen": hostPort(n.PGPort), "connect_address": hostPort(n.PGPort),
			"data_dir": n.dataDir, "bin_dir": binDir,
			"pgpass": filepath.Join(c.dir, n.Name, "pgpass"),
			"authentication": map[string]any{
				"superuser": auth("postgres", c.password), "replication": auth("replicator", replication),
				"rewind": auth("postgres", c.password),
			},
			"parameters": map[string]any{"unix_socket_directories": filepath.Join(c.dir, n.Name)},
		},
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(n.config, b, 0o600); err != nil {
		return fmt.Errorf("cannot write %s: %w", n.config, err)
	}
	return c.chown(n.config)
}

// Hosts is the node list as PG_HOST takes it: host:port entries, in node order.
func (c *Cluster) Hosts() string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = hostPort(n.PGPort)
	}
	return strings.Join(out, ",")
}

// Password is the superuser's (postgres) password.
func (c *Cluster) Password() string { return c.password }

// ConnString reaches database db on whichever node accepts writes.
func (c *Cluster) ConnString(db string) string {
	hosts, ports := make([]string, len(c.Nodes)), make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		hosts[i], ports[i] = "127.0.0.1", strconv.Itoa(n.PGPort)
	}
	return fmt.Sprintf("host=%s port=%s user=postgres password=%s dbname=%s sslmode=disable target_session_attrs=read-write",
		strings.Join(hosts, ","), strings.Join(ports, ","), c.password, db)
}

// Members asks the first node that answers for the cluster's members.
func (c *Cluster) Members(ctx context.Context) ([]Member, error) {
	var errs []error
	for _, n := range c.Nodes {
		var body struct{ Members []Member }
		if err := n.api(ctx, "GET", "/cluster", nil, &body); err != nil {
			errs = append(errs, err)
			continue
		}
		return body.Members, nil
	}
	return nil, fmt.Errorf("no Patroni REST API answered: %w", errors.Join(errs...))
}

// Node returns the node named name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// WaitHealthy waits until every node runs on the leader's timeline with a synchronous standby,
// and the leader is not the node named notLeader (when not "").
func (c *Cluster) WaitHealthy(ctx context.Context, notLeader string) error {
	var last []Member
	var lastErr error
	for {
		ms, err := c.Members(ctx)
		last, lastErr = ms, err
		if err == nil && healthy(ms, len(c.Nodes), notLeader) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the patroni cluster in %s is not healthy (members %+v, %v): %w\n%s", c.dir, last, lastErr, ctx.Err(), c.LogTails())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func healthy(ms []Member, nodes int, notLeader string) bool {
	leader, sync, running := -1, 0, 0
	for i, m := range ms {
		switch m.Role {
		case "leader", "master", "primary":
			if m.State == "running" && m.Name != notLeader {
				leader = i
			}
		case "sync_standby":
			sync++
		}
	}
	if leader < 0 || sync == 0 {
		return false
	}
	for _, m := range ms {
		if (m.State == "running" || m.State == "streaming") && m.Timeline == ms[leader].Timeline {
			running++
		}
	}
	return running == nodes
}

// Leader returns the node Patroni reports as leader.
func (c *Cluster) Leader(ctx context.Context) (*Node, error) {
	return c.withRole(ctx, "leader")
}

// SyncStandby returns the node Patroni reports as the synchronous standby.
func (c *Cluster) SyncStandby(ctx context.Context) (*Node, error) {
	return c.withRole(ctx, "sync_standby")
}

func (c *Cluster) withRole(ctx context.Context, role string) (*Node, error) {
	ms, err := c.Members(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if m.Role == role && m.State != "stopped" {
			return c.Node(m.Name), nil
		}
	}
	return nil, fmt.Errorf("no member is %s (members %+v)", role, ms)
}

// Switchover asks Patroni for a planned switchover from the current leader to candidate, as
// patronictl switchover does, and returns once Patroni says it is done.
func (c *Cluster) Switchover(ctx context.Context, candidate *Node) error {
	leader, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	body := map[string]string{"leader": leader.Name, "candidate": candidate.Name}
	if err := leader.api(ctx, "POST", "/switchover", body, nil); err != nil {
		return fmt.Errorf("cannot switch over from %s to %s: %w", leader.Name, candidate.Name, err)
	}
	return nil
}

// PauseDCS stops etcd with SIGSTOP: Patroni's calls to it hang, as over a partitioned network.
func (c *Cluster) PauseDCS() error { return c.etcd.signal(syscall.SIGSTOP) }

// ResumeDCS lets etcd run again.
func (c *Cluster) ResumeDCS() error { return c.etcd.signal(syscall.SIGCONT) }

// LogTails returns the end of every process's log, for a failure message.
func (c *Cluster) LogTails() string {
	var b strings.Builder
	for _, name := range append([]string{"etcd"}, c.nodeNames()...) {
		out, _ := os.ReadFile(filepath.Join(c.dir, name+".log"))
		if len(out) > 3000 {
			out = out[len(out)-3000:]
		}
		fmt.Fprintf(&b, "--- %s.log\n%s\n", name, out)
	}
	return b.String()
}

// Log returns a node's Patroni log so far.
func (n *Node) Log() string {
	out, _ := os.ReadFile(filepath.Join(n.c.dir, n.Name+".log"))
	return string(out)
}

func (c *Cluster) nodeNames() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Name
	}
	return out
}

// Stop stops every node (Patroni shuts its PostgreSQL down), then etcd. Nodes that do not stop
// within half a minute are killed.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		n.mu.Lock()
		if n.proc != nil {
			_ = n.proc.signal(syscall.SIGTERM)
		}
		n.mu.Unlock()
	}
	for _, n := range c.Nodes {
		n.mu.Lock()
		p := n.proc
		n.proc = nil
		n.mu.Unlock()
		if p != nil && !p.waitFor(30*time.Second) {
			c.log.Warn("patroni did not stop within 30 s; killing it", "node", n.Name)
			_ = p.signal(syscall.SIGKILL)
		}
		_ = localpg.KillServer(n.dataDir)
	}
	if c.etcd != nil {
		_ = c.etcd.signal(syscall.SIGCONT)
		_ = c.etcd.signal(syscall.SIGTERM)
		if !c.etcd.waitFor(10 * time.Second) {
			_ = c.etcd.signal(syscall.SIGKILL)
		}
	}
}

// Start starts the node's Patroni; on a data directory that exists it rejoins the cluster
// (rewinding a former primary).
func (n *Node) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil {
		return fmt.Errorf("node %s is running", n.Name)
	}
	p, err := n.c.spawn(n.Name, "patroni", n.config)
	if err != nil {
		return err
	}
	n.proc = p
	return nil
}

// Stop shuts the node down cleanly: Patroni stops its PostgreSQL and gives up its role.
func (n *Node) Stop() error { return n.end(syscall.SIGTERM) }

// Kill ends the node as the loss of its machine would: SIGKILL to Patroni, then to its
// PostgreSQL's every process. Nothing is shut down cleanly and the leader key stays in etcd
// until its ttl runs out.
func (n *Node) Kill() error { return n.end(syscall.SIGKILL) }

// end sends sig to the node's Patroni, waits for it to exit, then kills what is left of its
// PostgreSQL (nothing after a clean stop).
func (n *Node) end(sig syscall.Signal) error {
	n.mu.Lock()
	p := n.proc
	n.proc = nil
	n.mu.Unlock()
	if p == nil {
		return fmt.Errorf("node %s is not running", n.Name)
	}
	if err := p.signal(sig); err != nil {
		return err
	}
	if !p.waitFor(time.Minute) {
		_ = p.signal(syscall.SIGKILL)
		return fmt.Errorf("patroni of node %s did not exit within a minute of %v", n.Name, sig)
	}
	return localpg.KillServer(n.dataDir)
}

// api calls the node's REST API; out, when not nil, receives the JSON answer.
func (n *Node) api(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+hostPort(n.APIPort)+path, body)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s on %s: %d %s", method, path, n.Name, resp.StatusCode, bytes.TrimSpace(raw))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

// process is a program the cluster started, with its output in DIR/NAME.log.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (c *Cluster) spawn(name, bin string, args ...string) (*process, error) {
	logPath := filepath.Join(c.dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cannot open %s: %w", logPath, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = f, f
	// PG* variables would steer Patroni's own connections elsewhere.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "ETCD") && !strings.HasPrefix(kv, "PATRONI") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "LC_ALL=C.UTF-8", "HOME="+c.dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("cannot start %s: %w", bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// signal sends sig to the process's group: Patroni's helpers go with it.
func (p *process) signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("cannot signal process %d: %w", p.cmd.Process.Pid, err)
	}
	return nil
}

func (p *process) waitFor(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// mkdir creates dir for the cluster's user, private to it (PostgreSQL and etcd insist).
func (c *Cluster) mkdir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cannot create %s: %w", dir, err)
	}
	return c.chown(dir)
}

func (c *Cluster) chown(path string) error {
	if c.cred == nil {
		return nil
	}
	if err := os.Chown(path, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
		return fmt.Errorf("cannot hand %s to the server's user: %w", path, err)
	}
	return nil
}

// freePorts reserves n loopback ports at once and releases them for the processes to take.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("cannot find a free port: %w", err)
		}
		lns = append(lns, ln)
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

func secret() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

func url(port int) string { return "http://" + hostPort(port) }

// Package config reads the broker's configuration from environment variables. Names and defaults
// follow the reference broker; unlike it, a malformed value stops the boot with an error naming
// the variable instead of silently falling back to the default.
package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"queen/auth"
	"queen/pg"
)

// Config is the whole broker configuration.
type Config struct {
	// HTTP listener.
	BindAddr     string // QUEEN_BIND_ADDR (alias HOST)
	Port         int    // PORT
	MaxBodyBytes int    // QUEEN_MAX_BODY_BYTES
	// MaxRequestItems (QUEEN_MAX_ITEMS_PER_REQUEST) caps the array entries of one request body
	// (push items, acknowledgments, transaction operations and their items, together).
	MaxRequestItems int
	// CORSOrigins (QUEEN_CORS_ALLOWED_ORIGINS) are the origins browsers may call the API from;
	// empty: no CORS headers, and cross-origin browser requests are refused.
	CORSOrigins []string
	// MaxConnections (QUEEN_MAX_CONNECTIONS) caps the HTTP connections served at once; the
	// broker lowers it to what the descriptor limit allows (server/listener.go).
	MaxConnections int
	// MetricsBindAddr (QUEEN_METRICS_BIND_ADDR, host:port): when set, /metrics and
	// /metrics/prometheus are served there and not on the main listener.
	MetricsBindAddr string
	// MetricsRefresh (QUEEN_METRICS_REFRESH_MS, 0: off) is the period of the one database read
	// behind the per-queue, per-group and cluster-wide series (server/metrics.go).
	MetricsRefresh time.Duration
	// MetricsMaxSeries (QUEEN_METRICS_MAX_SERIES) caps the queues, and separately the (consumer
	// group, queue) pairs, that get series of their own.
	MetricsMaxSeries int
	// LogRates (QUEEN_LOG_RATES_MS, 0: off) is the period of the rates log line.
	LogRates time.Duration

	// PG is the broker's PostgreSQL: PG_HOST (the servers to try in order, PG_PORT for an entry
	// without a port of its own), PG_USER, PG_PASSWORD, PG_DB, PG_USE_SSL,
	// PG_SSL_REJECT_UNAUTHORIZED, PG_SSL_ROOT_CERT, DB_POOL_SIZE and QUEEN_DATA_DIR, where the
	// broker runs its own PostgreSQL when PG_HOST is unset.
	PG            pg.Settings
	DBConnTimeout time.Duration // DB_CONNECTION_TIMEOUT (ms)
	DBStmtTimeout time.Duration // DB_STATEMENT_TIMEOUT (ms)
	// EncryptionKey is QUEEN_ENCRYPTION_KEY decoded: 32 bytes of AES-256 key, nil when unset.
	EncryptionKey []byte

	// TenancyHeader (QUEEN_TENANCY_HEADER) scopes queue identity by the x-queen-tenant header;
	// it requires TrustedProxy (QUEEN_KV_TRUSTED_PROXY), the operator's statement that only a
	// trusted gateway can set that header.
	TenancyHeader bool
	TrustedProxy  bool

	// Pop defaults and long-poll re-check schedule.
	DefaultTimeout           time.Duration // DEFAULT_TIMEOUT (ms)
	DefaultBatchSize         int
	DefaultSubscriptionMode  string
	PopWaitInitialInterval   time.Duration
	PopWaitBackoffThreshold  int
	PopWaitBackoffMultiplier float64
	PopWaitMaxInterval       time.Duration
	// Caps on parked long-polls: past either, a long-poll is answered empty at once.
	MaxParkedPerQueue int // QUEEN_MAX_PARKED_PER_QUEUE
	MaxParked         int // QUEEN_MAX_PARKED: over every queue of the broker

	// Fusion of requests into database transactions.
	PushMaxBatch    int           // QUEEN_PUSH_MAX_BATCH_SIZE: messages per fused push transaction
	AckMaxBatch     int           // QUEEN_ACK_MAX_BATCH_SIZE
	PushLanes       int           // QUEEN_PUSH_MAX_CONCURRENT: push lanes, one transaction in flight each
	AckInFlight     int           // QUEEN_ACK_MAX_CONCURRENT: fused ack transactions in flight
	RequestDeadline time.Duration // QUEEN_REQUEST_DEADLINE_MS: how long a request waits on the database

	// Background jobs.
	RetentionInterval    time.Duration
	RetentionBatchSize   int
	EvictionInterval     time.Duration
	EvictionBatchSize    int
	PartitionCleanupDays int
	// StatsRetentionDays (QUEEN_STATS_RETENTION_DAYS) is how long the per-minute statistics of
	// the status and analytics routes are kept; the retention job deletes older ones.
	StatsRetentionDays int

	// Disk spool (push maintenance and database outages).
	SpoolDir      string        // FILE_BUFFER_DIR (default QUEEN_DATA_DIR/spool)
	SpoolFlush    time.Duration // FILE_BUFFER_FLUSH_MS: drain cadence
	SpoolMaxBatch int           // FILE_BUFFER_MAX_BATCH: records per replay transaction
	SpoolAfter    time.Duration // FILE_BUFFER_DB_WAIT_MS: how long a push waits on PostgreSQL before it is spooled
	SpoolMaxBytes int64         // FILE_BUFFER_MAX_BYTES: bound of the pending spool segments (0: none)
	FlagsRefresh  time.Duration // QUEEN_CACHE_REFRESH_INTERVAL_MS: re-read of the maintenance flags
	MeshEnabled   bool          // QUEEN_SYNC_ENABLED
	MeshPeers     []string      // QUEEN_MESH_PEERS (alias QUEEN_UDP_PEERS), host:port
	MeshPort      int           // QUEEN_MESH_PORT (alias QUEEN_UDP_NOTIFY_PORT)
	MeshBindAddr  string        // QUEEN_MESH_BIND_ADDR (default QUEEN_BIND_ADDR)
	MeshSecret    string        // QUEEN_SYNC_SECRET
	MeshHeartbeat time.Duration // QUEEN_SYNC_HEARTBEAT_MS
	MeshDeadAfter time.Duration // QUEEN_SYNC_DEAD_THRESHOLD_MS
	AdvertiseHost string        // QUEEN_MESH_ADVERTISE_HOST

	ServerID  string // QUEEN_SERVER_ID
	PprofAddr string // QUEEN_PPROF_ADDR: serve net/http/pprof there when set (keep it on loopback)
	LogLevel  slog.Level
	JWT       auth.Config // JWT_*: the others are read, and checked, only when JWT_ENABLED=true
}

// Load reads the configuration through getenv (os.Getenv in production, a map in tests).
func Load(getenv func(string) string) (Config, error) {
	r := reader{getenv: getenv}
	host, _ := os.Hostname()
	c := Config{
		BindAddr:     r.str("0.0.0.0", "QUEEN_BIND_ADDR", "HOST"),
		Port:         r.intIn(6632, 1, 65535, "PORT"),
		MaxBodyBytes: r.intIn(64<<20, 1024, 1<<30, "QUEEN_MAX_BODY_BYTES"),
		// 10,000 entries is ten times the largest batch the official clients send; past it a
		// body holds more items than one fused transaction takes anyway.
		MaxRequestItems: r.intIn(10000, 1, 1000000, "QUEEN_MAX_ITEMS_PER_REQUEST"),

		MaxConnections: r.intIn(10000, 1, 1<<20, "QUEEN_MAX_CONNECTIONS"),

		MetricsRefresh:   r.period(10000, 100, "QUEEN_METRICS_REFRESH_MS"),
		MetricsMaxSeries: r.intIn(10000, 0, 1000000, "QUEEN_METRICS_MAX_SERIES"),
		LogRates:         r.period(10000, 1000, "QUEEN_LOG_RATES_MS"),

		PG: r.postgres(postgresVars{prefix: "PG_", password: "postgres", db: "postgres",
			poolVar: "DB_POOL_SIZE", pool: 20, minPool: 2, maxPool: 10000, dataDirVar: "QUEEN_DATA_DIR", dataDir: ".queen"}),
		DBConnTimeout: r.millis(2000, "DB_CONNECTION_TIMEOUT"),
		DBStmtTimeout: r.millis(30000, "DB_STATEMENT_TIMEOUT"),

		DefaultTimeout:           r.millis(30000, "DEFAULT_TIMEOUT"),
		DefaultBatchSize:         r.intIn(1, 1, 100000, "DEFAULT_BATCH_SIZE"),
		DefaultSubscriptionMode:  r.oneOf("", []string{"", "all", "new", "new-only"}, "DEFAULT_SUBSCRIPTION_MODE"),
		PopWaitInitialInterval:   r.millis(100, "POP_WAIT_INITIAL_INTERVAL_MS"),
		PopWaitBackoffThreshold:  r.intIn(3, 0, 1000, "POP_WAIT_BACKOFF_THRESHOLD"),
		PopWaitBackoffMultiplier: r.float(2.0, "POP_WAIT_BACKOFF_MULTIPLIER"),
		PopWaitMaxInterval:       r.millis(1000, "POP_WAIT_MAX_INTERVAL_MS"),
		MaxParkedPerQueue:        r.intIn(10000, 1, 10000000, "QUEEN_MAX_PARKED_PER_QUEUE"),
		MaxParked:                r.intIn(50000, 1, 10000000, "QUEEN_MAX_PARKED"),

		PushMaxBatch: r.intIn(2000, 1, 100000, "QUEEN_PUSH_MAX_BATCH_SIZE"),
		AckMaxBatch:  r.intIn(2000, 1, 100000, "QUEEN_ACK_MAX_BATCH_SIZE"),
		// Two lanes measured best on two cores: more lanes make smaller batches and more
		// commits (push 1 per request, 64 connections: 8.6k msg/s with 2, 7.2k with 4, 5.0k
		// with 8), while large pushes are the same with 2 or 4.
		PushLanes:       r.intIn(2, 1, 256, "QUEEN_PUSH_MAX_CONCURRENT"),
		AckInFlight:     r.intIn(4, 1, 256, "QUEEN_ACK_MAX_CONCURRENT"),
		RequestDeadline: r.millis(10000, "QUEEN_REQUEST_DEADLINE_MS"),

		RetentionInterval:    r.millis(300000, "RETENTION_INTERVAL"),
		RetentionBatchSize:   r.intIn(1000, 1, 1000000, "RETENTION_BATCH_SIZE"),
		EvictionInterval:     r.millis(60000, "EVICTION_INTERVAL"),
		EvictionBatchSize:    r.intIn(1000, 1, 1000000, "EVICTION_BATCH_SIZE"),
		PartitionCleanupDays: r.intIn(30, 0, 100000, "PARTITION_CLEANUP_DAYS"),
		StatsRetentionDays:   r.intIn(7, 1, 3650, "QUEEN_STATS_RETENTION_DAYS"),

		SpoolFlush:    r.millis(100, "FILE_BUFFER_FLUSH_MS"),
		SpoolMaxBatch: r.intIn(100, 1, 100000, "FILE_BUFFER_MAX_BATCH"),
		SpoolAfter:    r.millis(2000, "FILE_BUFFER_DB_WAIT_MS"),
		// 10 GiB: about 25 minutes of pushes at the 20k msg/s one broker takes, hours at
		// ordinary rates. A fixed size rather than a share of the free disk, which other
		// programs change under the broker: the operator sizes it to the spool's disk.
		SpoolMaxBytes: r.int64In(10<<30, 0, 1<<60, "FILE_BUFFER_MAX_BYTES"),
		FlagsRefresh:  r.millis(10000, "QUEEN_CACHE_REFRESH_INTERVAL_MS"),
		MeshEnabled:   r.boolean(true, "QUEEN_SYNC_ENABLED"),
		MeshPort:      r.intIn(6633, 1, 65535, "QUEEN_MESH_PORT", "QUEEN_UDP_NOTIFY_PORT"),
		MeshSecret:    r.str("", "QUEEN_SYNC_SECRET"),
		MeshHeartbeat: r.millis(1000, "QUEEN_SYNC_HEARTBEAT_MS"),
		MeshDeadAfter: r.millis(5000, "QUEEN_SYNC_DEAD_THRESHOLD_MS"),
		AdvertiseHost: r.str(host, "QUEEN_MESH_ADVERTISE_HOST"),
		PprofAddr:     r.str("", "QUEEN_PPROF_ADDR"),
		LogLevel:      r.level("LOG_LEVEL"),
		JWT:           r.jwt(),
	}
	c.ServerID = r.str(fmt.Sprintf("%s:%d", host, c.Port), "QUEEN_SERVER_ID")
	c.SpoolDir = r.str(filepath.Join(c.PG.DataDir, "spool"), "FILE_BUFFER_DIR")
	c.MeshBindAddr = r.str(c.BindAddr, "QUEEN_MESH_BIND_ADDR")
	c.MeshPeers = r.peers(c.MeshPort, "QUEEN_MESH_PEERS", "QUEEN_UDP_PEERS")
	c.CORSOrigins = r.origins("QUEEN_CORS_ALLOWED_ORIGINS")
	r.security(&c)
	// Both drive loops that must run: a drain that never ticks leaves an outage's spool on disk.
	if c.SpoolFlush <= 0 {
		r.fail("FILE_BUFFER_FLUSH_MS", fmt.Sprint(c.SpoolFlush.Milliseconds()), "must be at least 1")
	}
	if c.FlagsRefresh <= 0 {
		r.fail("QUEEN_CACHE_REFRESH_INTERVAL_MS", fmt.Sprint(c.FlagsRefresh.Milliseconds()), "must be at least 1")
	}
	if c.PopWaitBackoffMultiplier < 1 {
		r.fail("POP_WAIT_BACKOFF_MULTIPLIER", fmt.Sprint(c.PopWaitBackoffMultiplier), "must be at least 1")
	}
	if strings.ContainsAny(c.BindAddr, " /") {
		r.fail("QUEEN_BIND_ADDR", c.BindAddr, "must be a host name or an IP address")
	}
	if r.err != nil {
		return Config{}, r.err
	}
	return c, nil
}

// reader records the first bad variable; later reads still run so Load stays a flat list.
type reader struct {
	getenv func(string) string
	err    error
}

func (r *reader) fail(name, value, why string) {
	if r.err == nil {
		r.err = fmt.Errorf("invalid %s=%q: %s", name, value, why)
	}
}

// lookup returns the first set variable among names (the first is the canonical one, the rest
// are aliases), and its name.
func (r *reader) lookup(names ...string) (string, string, bool) {
	for _, n := range names {
		if v := r.getenv(n); v != "" {
			return n, v, true
		}
	}
	return "", "", false
}

func (r *reader) str(def string, names ...string) string {
	if _, v, ok := r.lookup(names...); ok {
		return v
	}
	return def
}

func (r *reader) intIn(def, min, max int, names ...string) int {
	return int(r.int64In(int64(def), int64(min), int64(max), names...))
}

func (r *reader) int64In(def, min, max int64, names ...string) int64 {
	name, v, ok := r.lookup(names...)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		r.fail(name, v, "must be an integer")
		return def
	}
	if n < min || n > max {
		r.fail(name, v, fmt.Sprintf("must be between %d and %d", min, max))
		return def
	}
	return n
}

func (r *reader) millis(def int, names ...string) time.Duration {
	return time.Duration(r.intIn(def, 0, 24*3600*1000, names...)) * time.Millisecond
}

// period reads milliseconds of a periodic task: 0 turns it off, anything else must be at least
// floor (a shorter period would cost more than it tells).
func (r *reader) period(def, floor int, name string) time.Duration {
	d := r.millis(def, name)
	if d != 0 && d < time.Duration(floor)*time.Millisecond {
		r.fail(name, r.getenv(name), fmt.Sprintf("must be 0 (off) or at least %d", floor))
		return time.Duration(def) * time.Millisecond
	}
	return d
}

func (r *reader) float(def float64, names ...string) float64 {
	name, v, ok := r.lookup(names...)
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil {
		r.fail(name, v, "must be a number")
		return def
	}
	return f
}

// boolean accepts exactly "true" or "false": the reference treats every other value as false,
// which turns a typo such as JWT_ENABLED=ture into a silently open broker.
func (r *reader) boolean(def bool, names ...string) bool {
	name, v, ok := r.lookup(names...)
	if !ok {
		return def
	}
	switch v {
	case "true":
		return true
	case "false":
		return false
	}
	r.fail(name, v, "must be true or false")
	return def
}

func (r *reader) oneOf(def string, allowed []string, names ...string) string {
	name, v, ok := r.lookup(names...)
	if !ok {
		return def
	}
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	r.fail(name, v, "must be one of "+strings.Join(allowed[1:], ", "))
	return def
}

// origins reads a comma-separated list of browser origins (scheme://host[:port], as a browser
// sends them in Origin, so a trailing slash or a path is a mistake) or "*" for any origin.
func (r *reader) origins(name string) []string {
	v := strings.TrimSpace(r.str("", name))
	if v == "" {
		return nil
	}
	var out []string
	for _, o := range strings.Split(v, ",") {
		o = strings.TrimSpace(o)
		if o == "*" {
			out = append(out, o)
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil {
			r.fail(name, v, "must be * or a comma-separated list of origins such as https://ops.example.com:8443")
			return nil
		}
		out = append(out, o)
	}
	return out
}

// peers reads a comma-separated list of host or host:port (an http:// or https:// prefix is
// dropped, a bare host gets the mesh port), as the reference accepts them.
func (r *reader) peers(port int, names ...string) []string {
	name, v, ok := r.lookup(names...)
	if !ok {
		return nil
	}
	var out []string
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		p = strings.TrimPrefix(strings.TrimPrefix(p, "http://"), "https://")
		if p == "" {
			continue
		}
		host, portStr, err := net.SplitHostPort(p)
		if err != nil {
			host, portStr = p, strconv.Itoa(port)
		}
		if n, err := strconv.Atoi(portStr); err != nil || n < 1 || n > 65535 || host == "" {
			r.fail(name, v, "must be a comma-separated list of host or host:port")
			return nil
		}
		out = append(out, net.JoinHostPort(host, portStr))
	}
	return out
}

// jwt reads the JWT variables when JWT_ENABLED=true and checks them together (algorithms
// against key material, the PEM, role names): every error names the variable.
func (r *reader) jwt() auth.Config {
	if !r.boolean(false, "JWT_ENABLED") {
		return auth.Config{}
	}
	c := auth.Defaults()
	c.Algorithm = r.str(c.Algorithm, "JWT_ALGORITHM")
	c.Secret = r.str("", "JWT_SECRET")
	c.PublicKey = r.str("", "JWT_PUBLIC_KEY")
	c.JWKSURL = strings.TrimSpace(r.str("", "JWT_JWKS_URL"))
	c.JWKSRefresh = time.Duration(r.intIn(int(c.JWKSRefresh/time.Second), 1, 7*24*3600, "JWT_JWKS_REFRESH_INTERVAL")) * time.Second
	c.JWKSTimeout = time.Duration(r.intIn(int(c.JWKSTimeout/time.Millisecond), 100, 60000, "JWT_JWKS_TIMEOUT_MS")) * time.Millisecond
	c.JWKSMinRefetch = time.Duration(r.intIn(int(c.JWKSMinRefetch/time.Millisecond), 0, 3600000, "JWT_JWKS_MIN_REFETCH_MS")) * time.Millisecond
	c.Issuer = r.str("", "JWT_ISSUER")
	c.Audience = r.str("", "JWT_AUDIENCE")
	c.ClockSkew = time.Duration(r.intIn(int(c.ClockSkew/time.Second), 0, 3600, "JWT_CLOCK_SKEW")) * time.Second
	c.RolesClaim = r.str(c.RolesClaim, "JWT_ROLES_CLAIM")
	c.RolesArrayClaim = r.str(c.RolesArrayClaim, "JWT_ROLES_ARRAY_CLAIM")
	c.RoleAdmin = r.str(c.RoleAdmin, "JWT_ROLE_ADMIN")
	c.RoleReadWrite = r.str(c.RoleReadWrite, "JWT_ROLE_READ_WRITE")
	c.RoleReadOnly = r.str(c.RoleReadOnly, "JWT_ROLE_READ_ONLY")
	c.RoleWriteOnly = r.str(c.RoleWriteOnly, "JWT_ROLE_WRITE_ONLY")
	if v := r.str("", "JWT_SKIP_PATHS"); v != "" {
		paths, err := auth.ParseSkipPaths(v)
		if err != nil && r.err == nil {
			r.err = err
		}
		c.SkipPaths = paths
	}
	if err := c.Validate(); err != nil && r.err == nil {
		r.err = err
	}
	return c
}

func (r *reader) level(name string) slog.Level {
	v := r.str("info", name)
	switch strings.ToLower(v) {
	case "trace", "debug":
		return slog.LevelDebug
	case "info":
		return slog.LevelInfo
	case "warn", "warning":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	r.fail(name, v, "must be one of trace, debug, info, warn, error")
	return slog.LevelInfo
}

// security reads the listener, PostgreSQL TLS and payload encryption settings (see
// docs/security.md). Each mistake stops the boot naming the variable; no secret is repeated.
func (r *reader) security(c *Config) {
	bindVar, _, _ := r.lookup("QUEEN_BIND_ADDR", "HOST")
	r.bareHost(&c.BindAddr, bindVar, "PORT")
	meshVar, _, ok := r.lookup("QUEEN_MESH_BIND_ADDR")
	if !ok {
		meshVar = bindVar // the mesh binds where the HTTP listener does
	}
	r.bareHost(&c.MeshBindAddr, meshVar, "QUEEN_MESH_PORT")
	if v := strings.TrimSpace(r.str("", "QUEEN_METRICS_BIND_ADDR")); v != "" {
		host, port, err := net.SplitHostPort(v)
		n, perr := strconv.Atoi(port)
		if err != nil || perr != nil || n < 0 || n > 65535 || strings.ContainsAny(host, " /") {
			r.fail("QUEEN_METRICS_BIND_ADDR", v, "must be host:port (e.g. 127.0.0.1:9632)")
		}
		c.MetricsBindAddr = v
	}

	c.EncryptionKey = r.aesKey("QUEEN_ENCRYPTION_KEY")

	c.TenancyHeader = r.boolean(false, "QUEEN_TENANCY_HEADER")
	c.TrustedProxy = r.boolean(false, "QUEEN_KV_TRUSTED_PROXY")
	if err := c.CheckTenancy(); err != nil && r.err == nil {
		r.err = err
	}
}

// aesKey reads an AES-256 key given as exactly 64 hexadecimal characters (32 bytes, as printed
// by `openssl rand -hex 32`); nil when unset. The error never repeats the value.
func (r *reader) aesKey(name string) []byte {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return nil
	}
	raw, err := hex.DecodeString(v)
	why := ""
	switch {
	case len(v) != 64:
		why = fmt.Sprintf("must be exactly 64 hex characters (32 bytes, e.g. openssl rand -hex 32), got %d characters", len(v))
	case err != nil:
		why = "must be 64 hex characters (0-9, a-f): it is not valid hex"
	default:
		return raw
	}
	if r.err == nil {
		r.err = fmt.Errorf("invalid %s (value not shown): %s", name, why)
	}
	return nil
}

// CheckTenancy refuses QUEEN_TENANCY_HEADER=true without QUEEN_KV_TRUSTED_PROXY=true.
func (c Config) CheckTenancy() error {
	if c.TenancyHeader && !c.TrustedProxy {
		return errors.New("QUEEN_TENANCY_HEADER=true requires QUEEN_KV_TRUSTED_PROXY=true: the x-queen-tenant header is not a credential, so it must only be set by a trusted gateway that strips it from clients")
	}
	return nil
}

// bareHost checks a bind address: a host name or an IP address, without a port (the port has
// a variable of its own). A bracketed IPv6 address loses its brackets.
func (r *reader) bareHost(addr *string, name, portVar string) {
	v := *addr
	if strings.HasPrefix(v, "[") && strings.HasSuffix(v, "]") {
		v = v[1 : len(v)-1]
	}
	if _, _, err := net.SplitHostPort(v); err == nil || strings.ContainsAny(v, " /[]") || v == "" {
		r.fail(name, *addr, "must be a bare host name or IP address, without a port (set the port with "+portVar+")")
		return
	}
	*addr = v
}

package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"queen/pg"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDefaults(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Port != 6632 || c.BindAddr != "0.0.0.0" || c.DefaultTimeout != 30*time.Second ||
		c.DefaultBatchSize != 1 || c.PG.Servers != nil || c.PG.DataDir != ".queen" || c.PG.Password != "postgres" || c.PG.PoolSize != 20 || c.JWT.Enabled ||
		c.MaxBodyBytes != 64<<20 || c.PopWaitInitialInterval != 100*time.Millisecond {
		t.Fatalf("unexpected defaults: %+v", c)
	}
}

func TestAliases(t *testing.T) {
	c, err := Load(env(map[string]string{"HOST": "127.0.0.1"}))
	if err != nil || c.BindAddr != "127.0.0.1" {
		t.Fatalf("HOST alias: %v %q", err, c.BindAddr)
	}
	c, err = Load(env(map[string]string{"HOST": "127.0.0.1", "QUEEN_BIND_ADDR": "::1"}))
	if err != nil || c.BindAddr != "::1" {
		t.Fatalf("QUEEN_BIND_ADDR must win over HOST: %v %q", err, c.BindAddr)
	}
}

func TestInvalidValuesNameTheVariable(t *testing.T) {
	for name, value := range map[string]string{
		"PORT":                        "http",
		"JWT_ENABLED":                 "yes",
		"DB_POOL_SIZE":                "-3",
		"DEFAULT_TIMEOUT":             "30s",
		"DEFAULT_SUBSCRIPTION_MODE":   "latest",
		"LOG_LEVEL":                   "loud",
		"POP_WAIT_BACKOFF_MULTIPLIER": "x",
		"FILE_BUFFER_MAX_BYTES":       "10GiB",
		// Loops that must run: 0 would stop the spool drain, or the flag re-read, for good.
		"FILE_BUFFER_FLUSH_MS":            "0",
		"QUEEN_CACHE_REFRESH_INTERVAL_MS": "0",
	} {
		_, err := Load(env(map[string]string{name: value}))
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: want an error naming the variable, got %v", name, value, err)
		}
	}
}

func TestParkingCaps(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil || c.MaxParkedPerQueue != 10000 || c.MaxParked != 50000 {
		t.Fatalf("default caps: %v %d %d", err, c.MaxParkedPerQueue, c.MaxParked)
	}
	c, err = Load(env(map[string]string{"QUEEN_MAX_PARKED_PER_QUEUE": "10", "QUEEN_MAX_PARKED": "20"}))
	if err != nil || c.MaxParkedPerQueue != 10 || c.MaxParked != 20 {
		t.Fatalf("set caps: %v %d %d", err, c.MaxParkedPerQueue, c.MaxParked)
	}
	for _, name := range []string{"QUEEN_MAX_PARKED_PER_QUEUE", "QUEEN_MAX_PARKED"} {
		for _, value := range []string{"0", "-1", "1e4", "ten", "10000001"} {
			if _, err := Load(env(map[string]string{name: value})); err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s=%s: want an error naming the variable, got %v", name, value, err)
			}
		}
	}
}

// QUEEN_MAX_CONNECTIONS is a strict integer of at least 1, 10000 by default.
func TestMaxConnections(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil || c.MaxConnections != 10000 {
		t.Fatalf("default: %v %d, want 10000", err, c.MaxConnections)
	}
	c, err = Load(env(map[string]string{"QUEEN_MAX_CONNECTIONS": "500"}))
	if err != nil || c.MaxConnections != 500 {
		t.Fatalf("500: %v %d", err, c.MaxConnections)
	}
	for _, v := range []string{"0", "-1", "10k", "1e4", "2000000"} {
		if _, err := Load(env(map[string]string{"QUEEN_MAX_CONNECTIONS": v})); err == nil || !strings.Contains(err.Error(), "QUEEN_MAX_CONNECTIONS") {
			t.Errorf("QUEEN_MAX_CONNECTIONS=%s: want an error naming the variable, got %v", v, err)
		}
	}
}

// TestSpoolMaxBytes: a plain byte count, 10 GiB by default, 0 for no bound, never negative.
func TestSpoolMaxBytes(t *testing.T) {
	for v, want := range map[string]int64{"": 10 << 30, "0": 0, "65536": 65536, " 21474836480 ": 20 << 30} {
		c, err := Load(env(map[string]string{"FILE_BUFFER_MAX_BYTES": v}))
		if err != nil || c.SpoolMaxBytes != want {
			t.Errorf("FILE_BUFFER_MAX_BYTES=%q: %d, %v; want %d", v, c.SpoolMaxBytes, err, want)
		}
	}
	if _, err := Load(env(map[string]string{"FILE_BUFFER_MAX_BYTES": "-1"})); err == nil || !strings.Contains(err.Error(), "FILE_BUFFER_MAX_BYTES") {
		t.Errorf("FILE_BUFFER_MAX_BYTES=-1: %v; want an error naming the variable", err)
	}
}

// The observability settings: the periodic read and the rates line are on by default, 0 turns
// them off, a period under the floor or a malformed value stops the boot naming the variable.
func TestObservabilitySettings(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil || c.MetricsRefresh != 10*time.Second || c.MetricsMaxSeries != 10000 || c.LogRates != 10*time.Second {
		t.Fatalf("defaults: %v %v %d %v", err, c.MetricsRefresh, c.MetricsMaxSeries, c.LogRates)
	}
	c, err = Load(env(map[string]string{"QUEEN_METRICS_REFRESH_MS": "0", "QUEEN_METRICS_MAX_SERIES": "0", "QUEEN_LOG_RATES_MS": "0"}))
	if err != nil || c.MetricsRefresh != 0 || c.MetricsMaxSeries != 0 || c.LogRates != 0 {
		t.Fatalf("off: %v %v %d %v", err, c.MetricsRefresh, c.MetricsMaxSeries, c.LogRates)
	}
	c, err = Load(env(map[string]string{"QUEEN_METRICS_REFRESH_MS": "250", "QUEEN_LOG_RATES_MS": "1000"}))
	if err != nil || c.MetricsRefresh != 250*time.Millisecond || c.LogRates != time.Second {
		t.Fatalf("set: %v %v %v", err, c.MetricsRefresh, c.LogRates)
	}
	for name, values := range map[string][]string{
		"QUEEN_METRICS_REFRESH_MS": {"99", "-1", "10s"},
		"QUEEN_METRICS_MAX_SERIES": {"-1", "many", "1000001"},
		"QUEEN_LOG_RATES_MS":       {"999", "1", "x"},
	} {
		for _, v := range values {
			if _, err := Load(env(map[string]string{name: v})); err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s=%s: want an error naming the variable, got %v", name, v, err)
			}
		}
	}
}

// The per-minute statistics are kept 7 days by default; a value outside 1..3650 or malformed
// stops the boot naming the variable.
func TestStatsRetentionDays(t *testing.T) {
	if c, err := Load(env(nil)); err != nil || c.StatsRetentionDays != 7 {
		t.Fatalf("default: %v %d", err, c.StatsRetentionDays)
	}
	if c, err := Load(env(map[string]string{"QUEEN_STATS_RETENTION_DAYS": "30"})); err != nil || c.StatsRetentionDays != 30 {
		t.Fatalf("set: %v %d", err, c.StatsRetentionDays)
	}
	for _, v := range []string{"0", "-1", "3651", "7d"} {
		if _, err := Load(env(map[string]string{"QUEEN_STATS_RETENTION_DAYS": v})); err == nil || !strings.Contains(err.Error(), "QUEEN_STATS_RETENTION_DAYS") {
			t.Errorf("QUEEN_STATS_RETENTION_DAYS=%s: want an error naming the variable, got %v", v, err)
		}
	}
}

// PG_HOST is a list of servers: each entry a host, an IP address or a socket directory, with a
// port of its own or PG_PORT's. A malformed list stops the boot naming PG_HOST.
func TestPGHostList(t *testing.T) {
	c, err := Load(env(map[string]string{"PG_HOST": "db1.example.com, 10.0.0.2:5433,[::1]:6000,::2,/run/pg,/tmp/pg:5434", "PG_PORT": "5439"}))
	if err != nil {
		t.Fatal(err)
	}
	want := []pg.Server{{Host: "db1.example.com", Port: 5439}, {Host: "10.0.0.2", Port: 5433}, {Host: "::1", Port: 6000}, {Host: "::2", Port: 5439}, {Host: "/run/pg", Port: 5439}, {Host: "/tmp/pg", Port: 5434}}
	if !slices.Equal(c.PG.Servers, want) {
		t.Fatalf("PG_HOST parsed as %v, want %v", c.PG.Servers, want)
	}
	if got := c.PG.Servers[2].String(); got != "[::1]:6000" {
		t.Errorf("String of an IPv6 entry: %q", got)
	}
	c, err = Load(env(map[string]string{"PG_HOST": "db"}))
	if err != nil || !slices.Equal(c.PG.Servers, []pg.Server{{Host: "db", Port: 5432}}) {
		t.Fatalf("one host: %v %v", err, c.PG.Servers)
	}
	for _, v := range []string{"db1,", ",db1", "db1,,db2", "db1:0", "db1:65536", "db1:x", "db1:", ":5432", "db 1", "db1;db2", "run/pg", "http://db1"} {
		if _, err := Load(env(map[string]string{"PG_HOST": v})); err == nil || !strings.Contains(err.Error(), "PG_HOST") {
			t.Errorf("PG_HOST=%q: want an error naming PG_HOST, got %v", v, err)
		}
	}
}

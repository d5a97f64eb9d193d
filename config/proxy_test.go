package config

import (
	"strings"
	"testing"
	"time"
)

func TestProxyDefaults(t *testing.T) {
	c, err := LoadProxy(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if c.Port != 6711 || c.BindAddr != "0.0.0.0" || c.TLS() || c.Enforce || !c.TenantHeader ||
		c.UpstreamTimeout != 35*time.Second || c.LongPollMax != 90*time.Second || c.LongPollMargin != 10*time.Second {
		t.Fatalf("defaults: %+v", c)
	}
}

// A malformed proxy setting stops the boot with the variable's name, before anything binds.
func TestProxyInvalidSettings(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"QUEEN_PROXY_BIND_ADDR": "0.0.0.0:6711"}, "QUEEN_PROXY_BIND_ADDR"},
		{map[string]string{"QUEEN_PROXY_TLS_CERT": "/etc/proxy.crt"}, "QUEEN_PROXY_TLS_KEY"},
		{map[string]string{"QUEEN_PROXY_TLS_KEY": "/etc/proxy.key"}, "QUEEN_PROXY_TLS_CERT"},
		{map[string]string{"QUEEN_PROXY_PORT": "http"}, "QUEEN_PROXY_PORT"},
		{map[string]string{"QUEEN_PROXY_ENFORCE": "1"}, "QUEEN_PROXY_ENFORCE"},
		{map[string]string{"QUEEN_PROXY_JWT_SECRET": "short"}, "QUEEN_PROXY_JWT_SECRET"},
		{map[string]string{"QUEEN_PROXY_KEY_RATE": "-1"}, "QUEEN_PROXY_KEY_RATE"},
		{map[string]string{"QUEEN_PROXY_UPSTREAM_TIMEOUT_MS": "0"}, "QUEEN_PROXY_UPSTREAM_TIMEOUT_MS"},
	} {
		_, err := LoadProxy(func(k string) string { return tc.env[k] })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.env, err, tc.want)
		}
	}
	// The secret's value never appears in the error.
	_, err := LoadProxy(func(k string) string { return map[string]string{"QUEEN_PROXY_JWT_SECRET": "hunter2"}[k] })
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("short secret: %v", err)
	}
}

// The control-plane database is read as the broker's is, from PXDB_* variables with defaults
// of its own; a host list and a CA given as PEM content work as they do for PG_*.
func TestProxyDatabaseSettings(t *testing.T) {
	s, err := LoadProxyDB(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if s.Servers != nil || s.User != "postgres" || s.Password != "" || s.DB != "queen_proxy" || s.PoolSize != 16 ||
		s.DataDir != "./data/queen-proxy" || !s.RejectUnauthorized || s.UseSSL || s.Prefix != "PXDB_" {
		t.Fatalf("defaults: %+v", s)
	}
	s, err = LoadProxyDB(env(map[string]string{"PXDB_HOST": "a,b:6000", "PXDB_PORT": "5439", "PXDB_SSL_ROOT_CERT": malformedCA}))
	if err == nil || !strings.Contains(err.Error(), "PXDB_SSL_ROOT_CERT") {
		t.Fatalf("a malformed CA: %v", err)
	}
	s, err = LoadProxyDB(env(map[string]string{"PXDB_HOST": "a,b:6000", "PXDB_PORT": "5439"}))
	if err != nil || s.Hosts() != "a:5439,b:6000" {
		t.Fatalf("host list: %v %s", err, s.Hosts())
	}
	for name, value := range map[string]string{
		"PXDB_HOST":                    "a,,b",
		"PXDB_PORT":                    "postgres",
		"PXDB_POOL_SIZE":               "0",
		"PXDB_USE_SSL":                 "yes",
		"PXDB_SSL_REJECT_UNAUTHORIZED": "1",
		"PXDB_SSL_ROOT_CERT":           "/nonexistent/ca.pem",
	} {
		_, err := LoadProxyDB(env(map[string]string{name: value}))
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: %v, want an error naming %s", name, value, err, name)
		}
	}
	// The serving proxy reads the same settings.
	c, err := LoadProxy(env(map[string]string{"PXDB_DB": "cp"}))
	if err != nil || c.DB.DB != "cp" {
		t.Fatalf("LoadProxy: %v %+v", err, c.DB)
	}
}

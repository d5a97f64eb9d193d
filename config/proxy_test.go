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

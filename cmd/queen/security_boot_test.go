package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every listener, PostgreSQL TLS and encryption-key misconfiguration stops the boot with exit
// code 1 and a last line naming the variable, before anything starts; the key is never echoed.
func TestSecurityBootRefusesMisconfiguration(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("this is not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const shortKey = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde" // 63 characters
	const notHex = "zz23456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"  // 64, not hex
	cases := []struct {
		name, env, want string
		secret          string // must not appear in the output
	}{
		{"key too short", "QUEEN_ENCRYPTION_KEY=" + shortKey, "QUEEN_ENCRYPTION_KEY", shortKey},
		{"key not hex", "QUEEN_ENCRYPTION_KEY=" + notHex, "QUEEN_ENCRYPTION_KEY", notHex},
		{"CA file missing", "PG_SSL_ROOT_CERT=" + filepath.Join(dir, "missing.pem"), "PG_SSL_ROOT_CERT", ""},
		{"CA file not PEM", "PG_SSL_ROOT_CERT=" + garbage, "PG_SSL_ROOT_CERT", ""},
		{"CA PEM malformed", "PG_SSL_ROOT_CERT=-----BEGIN CERTIFICATE-----\\nAAAA\\n-----END CERTIFICATE-----", "PG_SSL_ROOT_CERT", ""},
		{"PG_USE_SSL not a boolean", "PG_USE_SSL=maybe", "PG_USE_SSL", ""},
		{"reject not a boolean", "PG_SSL_REJECT_UNAUTHORIZED=nope", "PG_SSL_REJECT_UNAUTHORIZED", ""},
		{"bind address with a port", "QUEEN_BIND_ADDR=0.0.0.0:6632", "QUEEN_BIND_ADDR", ""},
		{"bind address IPv6 with a port", "QUEEN_BIND_ADDR=[::1]:6632", "QUEEN_BIND_ADDR", ""},
		{"HOST alias with a port", "HOST=localhost:6632", "HOST", ""},
		{"mesh bind address with a port", "QUEEN_MESH_BIND_ADDR=127.0.0.1:6633", "QUEEN_MESH_BIND_ADDR", ""},
		{"metrics bind address without a port", "QUEEN_METRICS_BIND_ADDR=127.0.0.1", "QUEEN_METRICS_BIND_ADDR", ""},
		{"tenancy header without a trusted proxy", "QUEEN_TENANCY_HEADER=true", "QUEEN_KV_TRUSTED_PROXY", ""},
		{"tenancy header not a boolean", "QUEEN_TENANCY_HEADER=1", "QUEEN_TENANCY_HEADER", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := bootFails(t, tc.want, tc.env)
			if tc.secret != "" && strings.Contains(out, tc.secret) {
				t.Fatalf("the output repeats the key: %s", out)
			}
		})
	}
}

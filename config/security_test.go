package config

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBindAddresses(t *testing.T) {
	for in, want := range map[string]string{"127.0.0.1": "127.0.0.1", "::1": "::1", "[::1]": "::1", "broker.internal": "broker.internal", "fe80::1%eth0": "fe80::1%eth0"} {
		c, err := Load(env(map[string]string{"QUEEN_BIND_ADDR": in}))
		if err != nil || c.BindAddr != want || c.MeshBindAddr != want {
			t.Errorf("QUEEN_BIND_ADDR=%s: %v, bind %q mesh %q, want %q", in, err, c.BindAddr, c.MeshBindAddr, want)
		}
	}
	for _, bad := range []string{"0.0.0.0:6632", "[::1]:6632", "host:", "a b", "http://x"} {
		_, err := Load(env(map[string]string{"QUEEN_BIND_ADDR": bad}))
		if err == nil || !strings.Contains(err.Error(), "QUEEN_BIND_ADDR") {
			t.Errorf("QUEEN_BIND_ADDR=%s: %v, want an error naming it", bad, err)
		}
	}
	if _, err := Load(env(map[string]string{"QUEEN_MESH_BIND_ADDR": "10.0.0.1:6633"})); err == nil || !strings.Contains(err.Error(), "QUEEN_MESH_PORT") {
		t.Errorf("mesh bind address with a port: %v", err)
	}
}

func TestMetricsBindAddr(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil || c.MetricsBindAddr != "" {
		t.Fatalf("default: %v %q", err, c.MetricsBindAddr)
	}
	c, err = Load(env(map[string]string{"QUEEN_METRICS_BIND_ADDR": "127.0.0.1:9632"}))
	if err != nil || c.MetricsBindAddr != "127.0.0.1:9632" {
		t.Fatalf("127.0.0.1:9632: %v %q", err, c.MetricsBindAddr)
	}
	for _, bad := range []string{"127.0.0.1", ":http", "127.0.0.1:70000"} {
		if _, err := Load(env(map[string]string{"QUEEN_METRICS_BIND_ADDR": bad})); err == nil || !strings.Contains(err.Error(), "QUEEN_METRICS_BIND_ADDR") {
			t.Errorf("QUEEN_METRICS_BIND_ADDR=%s: %v", bad, err)
		}
	}
}

// malformedCA has the PEM frame of a certificate around bytes that do not parse as one.
const malformedCA = `-----BEGIN CERTIFICATE-----
MIIBfDCCASGgAwIBAgIBATAKBggqhkjOPQQDAjAYMRYwFAYDVQQDEw1xdWVlbiB0
ZXN0IENBMB4XDTI0MDEwMTAwMDAwMFoXDTM0MDEwMTAwMDAwMFowGDEWMBQGA1UE
AxMNcXVlZW4gdGVzdCBDQTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABFQk0Q2V
iO3v9g2bM7ePz6n2xQnBdvTXJ5e9dZ+4mQOqj1s3Qm0X8mI7vQx6b5yUq3KQ0x3t
pZq2r8iP0y0k0W6jWDBWMA4GA1UdDwEB/wQEAwIBBjAPBgNVHRMBAf8EBTADAQH/
MB0GA1UdDgQWBBQ0U1Y6y8Jr8yZ0hZ3D5YdC8b0vQzAUBgNVHREEDTALgglsb2Nh
bGhvc3QwCgYIKoZIzj0EAwIDSQAwRgIhAJ3n1Z0m7B0Z6Xz9fC6r1b5H1Z5p6Y3l
-----END CERTIFICATE-----`

func TestPostgresTLSSettings(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil || c.PG.UseSSL || !c.PG.RejectUnauthorized || c.PG.RootCert != nil {
		t.Fatalf("defaults: %v use_ssl %v reject %v ca %d bytes", err, c.PG.UseSSL, c.PG.RejectUnauthorized, len(c.PG.RootCert))
	}
	c, err = Load(env(map[string]string{"PG_USE_SSL": "true", "PG_SSL_REJECT_UNAUTHORIZED": "false"}))
	if err != nil || !c.PG.UseSSL || c.PG.RejectUnauthorized {
		t.Fatalf("PG_USE_SSL=true PG_SSL_REJECT_UNAUTHORIZED=false: %v %+v", err, c)
	}
	// Garbage inside BEGIN/END lines is refused as content or as a file.
	if _, err := Load(env(map[string]string{"PG_SSL_ROOT_CERT": malformedCA})); err == nil || !strings.Contains(err.Error(), "PG_SSL_ROOT_CERT") {
		t.Errorf("a malformed PEM was accepted: %v", err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(env(map[string]string{"PG_SSL_ROOT_CERT": path})); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("a junk CA file was accepted or not named: %v", err)
	}
}

func TestEncryptionKey(t *testing.T) {
	key := strings.Repeat("0f", 32)
	c, err := Load(env(map[string]string{"QUEEN_ENCRYPTION_KEY": key}))
	if err != nil || hex.EncodeToString(c.EncryptionKey) != key {
		t.Fatalf("a valid key: %v", err)
	}
	if c, err := Load(env(map[string]string{"QUEEN_ENCRYPTION_KEY": strings.ToUpper(key)})); err != nil || hex.EncodeToString(c.EncryptionKey) != key {
		t.Fatalf("an upper-case key: %v", err)
	}
	for _, bad := range []string{"short", strings.Repeat("g", 64), key + "00", strings.Repeat("a", 63)} {
		_, err := Load(env(map[string]string{"QUEEN_ENCRYPTION_KEY": bad}))
		if err == nil || !strings.Contains(err.Error(), "QUEEN_ENCRYPTION_KEY") || strings.Contains(err.Error(), bad) {
			t.Errorf("key %q: %v, want an error naming the variable and not the value", bad, err)
		}
	}
}

func TestTenancySettings(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil || c.TenancyHeader || c.TrustedProxy {
		t.Fatalf("default: %v tenancy %v trusted %v", err, c.TenancyHeader, c.TrustedProxy)
	}
	c, err = Load(env(map[string]string{"QUEEN_TENANCY_HEADER": "true", "QUEEN_KV_TRUSTED_PROXY": "true"}))
	if err != nil || !c.TenancyHeader || !c.TrustedProxy {
		t.Fatalf("both on: %v tenancy %v trusted %v", err, c.TenancyHeader, c.TrustedProxy)
	}
	for _, e := range []map[string]string{
		{"QUEEN_TENANCY_HEADER": "true"},
		{"QUEEN_TENANCY_HEADER": "true", "QUEEN_KV_TRUSTED_PROXY": "false"},
	} {
		_, err := Load(env(e))
		if err == nil || !strings.Contains(err.Error(), "QUEEN_TENANCY_HEADER") || !strings.Contains(err.Error(), "QUEEN_KV_TRUSTED_PROXY") {
			t.Errorf("%v: %v, want an error naming both variables", e, err)
		}
	}
	for _, name := range []string{"QUEEN_TENANCY_HEADER", "QUEEN_KV_TRUSTED_PROXY"} {
		if _, err := Load(env(map[string]string{name: "1"})); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=1: %v, want a strict boolean error", name, err)
		}
	}
}

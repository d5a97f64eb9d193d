package pxdb

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := ConfigFromEnv(envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Port: 5432, User: "postgres", DB: "queen_proxy", RejectUnauthorized: true, PoolSize: 16,
		DataDir: "./data/queen-proxy"}
	if c != want {
		t.Fatalf("defaults = %+v, want %+v", c, want)
	}
}

// A malformed value stops the start with an error naming the variable.
func TestConfigRefusesMalformedValues(t *testing.T) {
	t.Parallel()
	for name, value := range map[string]string{
		"PXDB_PORT":                    "postgres",
		"PXDB_POOL_SIZE":               "0",
		"PXDB_USE_SSL":                 "yes",
		"PXDB_SSL_REJECT_UNAUTHORIZED": "1",
		"PXDB_SSL_ROOT_CERT":           filepath.Join(t.TempDir(), "missing.pem"),
	} {
		_, err := ConfigFromEnv(envOf(map[string]string{name: value}))
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: %v, want an error naming %s", name, value, err, name)
		}
	}
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ConfigFromEnv(envOf(map[string]string{"PXDB_SSL_ROOT_CERT": notPEM})); err == nil ||
		!strings.Contains(err.Error(), "PXDB_SSL_ROOT_CERT") {
		t.Errorf("a CA file without a certificate: %v", err)
	}
}

// The connection settings reach pgx as given, whatever characters they hold, and the TLS
// variables become the matching sslmode.
func TestConnStringCarriesTheSettings(t *testing.T) {
	t.Parallel()
	ca := writeCA(t)
	for name, c := range map[string]struct {
		env        map[string]string
		tls        bool
		verified   bool
		customRoot bool
	}{
		"plaintext":  {env: map[string]string{}},
		"system CA":  {env: map[string]string{"PXDB_USE_SSL": "true"}, tls: true, verified: true},
		"given CA":   {env: map[string]string{"PXDB_USE_SSL": "true", "PXDB_SSL_ROOT_CERT": ca}, tls: true, verified: true, customRoot: true},
		"CA wins":    {env: map[string]string{"PXDB_USE_SSL": "true", "PXDB_SSL_ROOT_CERT": ca, "PXDB_SSL_REJECT_UNAUTHORIZED": "false"}, tls: true, verified: true, customRoot: true},
		"unverified": {env: map[string]string{"PXDB_USE_SSL": "true", "PXDB_SSL_REJECT_UNAUTHORIZED": "false"}, tls: true},
	} {
		env := map[string]string{"PXDB_HOST": "db.example", "PXDB_PORT": "6543", "PXDB_USER": "a b+c",
			"PXDB_PASSWORD": `p&w=d +'\"%`, "PXDB_DB": "proxy db", "PXDB_POOL_SIZE": "3"}
		for k, v := range c.env {
			env[k] = v
		}
		cfg, err := ConfigFromEnv(envOf(env))
		if err != nil {
			t.Fatal(err)
		}
		pc, err := pgxpool.ParseConfig(cfg.connString())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cc := pc.ConnConfig
		if cc.Host != "db.example" || cc.Port != 6543 || cc.User != "a b+c" || cc.Password != env["PXDB_PASSWORD"] ||
			cc.Database != "proxy db" || pc.MaxConns != 3 {
			t.Errorf("%s: parsed %s:%d user %q password %q db %q pool %d", name, cc.Host, cc.Port, cc.User, cc.Password, cc.Database, pc.MaxConns)
		}
		tc := cc.TLSConfig
		if (tc != nil) != c.tls || len(cc.Fallbacks) != 0 {
			t.Errorf("%s: TLS %v with %d fallbacks, want TLS %v and no fallback", name, tc != nil, len(cc.Fallbacks), c.tls)
			continue
		}
		if tc == nil {
			continue
		}
		if verified := !tc.InsecureSkipVerify && tc.ServerName == "db.example"; verified != c.verified {
			t.Errorf("%s: verified %v, want %v", name, verified, c.verified)
		}
		if (tc.RootCAs != nil) != c.customRoot {
			t.Errorf("%s: own roots %v, want %v", name, tc.RootCAs != nil, c.customRoot)
		}
	}
}

// writeCA writes a self-signed CA certificate and returns its path.
func writeCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

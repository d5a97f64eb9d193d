package server_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"queen/config"
	"queen/pg/localpg"
	"queen/server"
	"queen/testkit"
)

// testPKI is a throwaway CA and a server certificate it signed for localhost and 127.0.0.1.
type testPKI struct {
	caPEM, certPEM, keyPEM []byte
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	ca := testkit.NewCA(t)
	cert, key := ca.Issue(t, 2, []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	return testPKI{caPEM: ca.PEM, certPEM: cert, keyPEM: key}
}

// startTLSCluster runs a PostgreSQL cluster of its own listening on 127.0.0.1 with TLS on, and
// accepting TCP connections over TLS only (hostssl): a plaintext client is refused.
func startTLSCluster(t *testing.T, pki testPKI) int {
	t.Helper()
	dir := clusterDir(t, "queen-pgtls-")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := localpg.Start(ctx, localpg.Options{
		DataDir: dir, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		TCPPort:  port,
		Settings: map[string]string{"ssl": "on", "ssl_cert_file": "'server.crt'", "ssl_key_file": "'server.key'"},
		Files: map[string][]byte{
			"server.crt":  pki.certPEM,
			"server.key":  pki.keyPEM,
			"pg_hba.conf": []byte("local all all trust\nhostssl all all 127.0.0.1/32 trust\n"),
		},
	})
	if err != nil {
		t.Fatalf("cannot start the TLS cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := cl.Stop(); err != nil {
			t.Errorf("stop the TLS cluster: %v", err)
		}
	})
	return port
}

// bootAgainst starts a broker that reaches PostgreSQL through PG_HOST (not a test conn string),
// so it builds its connection, TLS included, the way the binary does. It returns the broker (nil
// when the boot failed), the boot error and the log, which grows as long as the broker runs.
func bootAgainst(t *testing.T, env map[string]string) (*meshNode, error, *testkit.LogBuffer) {
	t.Helper()
	vars := map[string]string{"FILE_BUFFER_DIR": t.TempDir(), "DB_CONNECTION_TIMEOUT": "5000"}
	for k, v := range env {
		vars[k] = v
	}
	cfg, err := config.Load(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &testkit.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := server.Start(ctx, cfg, log, server.Options{Listener: ln})
	if err != nil {
		ln.Close()
		return nil, err, logs
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := b.Shutdown(ctx); err != nil {
			t.Errorf("broker shutdown: %v", err)
		}
	})
	return &meshNode{t: t, name: cfg.ServerID, base: "http://" + b.Addr(), broker: b, hc: &http.Client{Timeout: time.Minute}}, nil, logs
}

// PostgreSQL TLS against a server with a self-signed CA: verify-full with PG_SSL_ROOT_CERT (a
// file, or the PEM itself) connects; without the CA the boot fails on the certificate; with
// PG_SSL_REJECT_UNAUTHORIZED=false it connects and the log says the link is unverified; and
// PG_USE_SSL=false is refused by the server, which shows the others really used TLS.
func TestPostgresTLS(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	port := startTLSCluster(t, pki)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pki.caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	base := map[string]string{"PG_HOST": "127.0.0.1", "PG_PORT": strconv.Itoa(port), "PG_DB": "postgres"}
	with := func(kv ...string) map[string]string {
		env := map[string]string{}
		for k, v := range base {
			env[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			env[kv[i]] = kv[i+1]
		}
		return env
	}

	t.Run("verify-full with the CA file", func(t *testing.T) {
		c, err, logs := bootAgainst(t, with("PG_USE_SSL", "true", "PG_SSL_ROOT_CERT", caFile))
		if err != nil {
			t.Fatalf("boot: %v\n%s", err, logs)
		}
		for _, want := range []string{`ssl_trust=supplied-ca`, `ssl_verified=true`, `PostgreSQL connection encrypted`} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("boot log lacks %q:\n%s", want, logs)
			}
		}
		pushWant(t, c, 200, "queued", item{"queue": "tlsq", "payload": map[string]any{"over": "tls"}})
		if p := popWith(t, c, "/api/v1/pop/queue/tlsq", "autoAck", "true"); len(p.Messages) != 1 || string(p.Messages[0].Data) != `{"over":"tls"}` {
			t.Fatalf("pop over TLS: %+v", p)
		}
	})
	t.Run("verify-full checks each host of a list under its own name", func(t *testing.T) {
		// 127.0.0.2 refuses (the server listens on 127.0.0.1) and is not in the certificate:
		// the connection that reaches localhost must be verified as localhost.
		c, err, logs := bootAgainst(t, with("PG_HOST", "127.0.0.2,localhost", "PG_USE_SSL", "true", "PG_SSL_ROOT_CERT", caFile))
		if err != nil {
			t.Fatalf("boot: %v\n%s", err, logs)
		}
		pushWant(t, c, 200, "queued", item{"queue": "tlsq3", "payload": 1})
	})
	t.Run("verify-full with the PEM in the variable", func(t *testing.T) {
		oneLine := strings.ReplaceAll(string(pki.caPEM), "\n", `\n`)
		if _, err, logs := bootAgainst(t, with("PG_USE_SSL", "true", "PG_SSL_ROOT_CERT", oneLine)); err != nil {
			t.Fatalf("boot: %v\n%s", err, logs)
		}
	})
	t.Run("verify-full without the CA fails", func(t *testing.T) {
		_, err, logs := bootAgainst(t, with("PG_USE_SSL", "true"))
		if err == nil {
			t.Fatalf("the boot succeeded against a certificate no trusted CA signed:\n%s", logs)
		}
		t.Logf("boot error: %v", err)
		if !strings.Contains(err.Error(), "PG_USE_SSL") || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("boot error %q should name PG_USE_SSL and the certificate problem", err)
		}
	})
	t.Run("unverified when PG_SSL_REJECT_UNAUTHORIZED=false", func(t *testing.T) {
		c, err, logs := bootAgainst(t, with("PG_USE_SSL", "true", "PG_SSL_REJECT_UNAUTHORIZED", "false"))
		if err != nil {
			t.Fatalf("boot: %v\n%s", err, logs)
		}
		for _, want := range []string{"UNVERIFIED", `ssl_trust=accept-any`, `ssl_verified=false`, `PostgreSQL connection encrypted`} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("boot log lacks %q:\n%s", want, logs)
			}
		}
		pushWant(t, c, 200, "queued", item{"queue": "tlsq2", "payload": 1})
	})
	t.Run("plaintext is refused by this server", func(t *testing.T) {
		_, err, logs := bootAgainst(t, with("PG_USE_SSL", "false"))
		if err == nil {
			t.Fatalf("a plaintext boot succeeded against a hostssl-only server:\n%s", logs)
		}
		t.Logf("boot error: %v", err)
	})
}

package main

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A bad configuration stops the boot before anything starts, naming the variable.
func TestBootRefusesBadConfiguration(t *testing.T) {
	for name, value := range map[string]string{"PORT": "http", "JWT_ENABLED": "yes", "DB_POOL_SIZE": "0"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, value)
			err := run()
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("%s=%s: got %v, want an error naming %s", name, value, err, name)
			}
		})
	}
}

// TestBootHelperProcess is not a test: bootFails runs the test binary again with
// QUEEN_BOOT_HELPER=1, and this runs main() in that process (exit code and output are main's).
func TestBootHelperProcess(t *testing.T) {
	if os.Getenv("QUEEN_BOOT_HELPER") != "1" {
		t.Skip("helper process for the boot misconfiguration tests")
	}
	main()
	os.Exit(0)
}

// bootFails runs the broker with env (and nothing else of this process's environment), requires
// it to exit with code 1 and a last line "queen: ..." naming want, and returns its whole output.
// A configuration that wrongly passed would meet a PostgreSQL that is not there and fail fast
// with a message naming no such variable.
func bootFails(t *testing.T, want string, env ...string) string {
	t.Helper()
	closed := closedPort(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestBootHelperProcess$")
	cmd.Env = append([]string{
		"QUEEN_BOOT_HELPER=1", "PATH=" + os.Getenv("PATH"),
		"PG_HOST=127.0.0.1", "PG_PORT=" + strings.TrimPrefix(closed, "127.0.0.1:"), "DB_CONNECTION_TIMEOUT=300",
		"QUEEN_DATA_DIR=" + t.TempDir(), "PORT=1",
	}, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v, want exit code 1; output:\n%s", err, out.String())
	}
	last := lastLine(out.String())
	if !strings.HasPrefix(last, "queen: ") || !strings.Contains(last, want) {
		t.Fatalf("last line %q, want \"queen: ...\" naming %s", last, want)
	}
	return out.String()
}

// Every JWT misconfiguration stops the boot with exit code 1 and a message naming the variable,
// before PostgreSQL is touched.
func TestJWTBootRefusesMisconfiguration(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	rsaPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	emptyJWKS := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"keys":[]}`))
	}))
	defer emptyJWKS.Close()
	closed := closedPort(t)

	cases := []struct {
		name string
		env  []string
		want string
	}{
		{"unknown algorithm", []string{"JWT_ALGORITHM=RS257", "JWT_SECRET=s"}, "JWT_ALGORITHM"},
		{"no key material", nil, "JWT_SECRET"},
		{"RS256 without a key", []string{"JWT_ALGORITHM=RS256", "JWT_SECRET=s"}, "JWT_PUBLIC_KEY"},
		{"EdDSA with an RSA key", []string{"JWT_ALGORITHM=EdDSA", "JWT_PUBLIC_KEY=" + rsaPEM}, "JWT_PUBLIC_KEY"},
		{"malformed PEM", []string{"JWT_ALGORITHM=RS256", "JWT_PUBLIC_KEY=-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----"}, "JWT_PUBLIC_KEY"},
		{"JWKS unreachable", []string{"JWT_ALGORITHM=RS256", "JWT_JWKS_URL=http://" + closed + "/jwks", "JWT_JWKS_TIMEOUT_MS=2000"}, "JWT_JWKS_URL"},
		{"JWKS without a usable key", []string{"JWT_ALGORITHM=auto", "JWT_JWKS_URL=" + emptyJWKS.URL}, "JWT_JWKS_URL"},
		{"JWKS URL not http", []string{"JWT_ALGORITHM=RS256", "JWT_JWKS_URL=file:///etc/jwks.json"}, "JWT_JWKS_URL"},
		{"role names collide", []string{"JWT_SECRET=s", "JWT_ROLE_WRITE_ONLY=admin"}, "JWT_ROLE_WRITE_ONLY"},
		{"skip path", []string{"JWT_SECRET=s", "JWT_SKIP_PATHS=/health,metrics"}, "JWT_SKIP_PATHS"},
		{"clock skew", []string{"JWT_SECRET=s", "JWT_CLOCK_SKEW=30s"}, "JWT_CLOCK_SKEW"},
		{"refresh interval", []string{"JWT_SECRET=s", "JWT_JWKS_REFRESH_INTERVAL=0"}, "JWT_JWKS_REFRESH_INTERVAL"},
		{"JWKS timeout", []string{"JWT_SECRET=s", "JWT_JWKS_TIMEOUT_MS=fast"}, "JWT_JWKS_TIMEOUT_MS"},
		{"enabled not a boolean", []string{"JWT_ENABLED=maybe"}, "JWT_ENABLED"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bootFails(t, tc.want, append([]string{"JWT_ENABLED=true"}, tc.env...)...)
		})
	}
}

// lastLine is the last non-empty line of a process's output.
func lastLine(out string) string {
	last := strings.TrimSpace(out)
	if i := strings.LastIndex(last, "\n"); i >= 0 {
		last = last[i+1:]
	}
	return last
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

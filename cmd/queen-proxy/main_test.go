package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"queen/config"
	"queen/pg/pgtest"
	"queen/proxy/pxdb"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// database makes a fresh database and returns the environment that points the commands at it,
// and a store on it to check what they did.
func database(t *testing.T) (map[string]string, *pxdb.Store) {
	t.Helper()
	cs := pgtest.NewDatabase(t)
	pc, err := pgconn.ParseConfig(cs)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"PXDB_HOST": pc.Host, "PXDB_PORT": strconv.Itoa(int(pc.Port)), "PXDB_USER": pc.User,
		"PXDB_PASSWORD": pc.Password, "PXDB_DB": pc.Database, "PXDB_POOL_SIZE": "2", "USER": "tester",
	}
	s, err := pxdb.OpenConn(testContext(t), cs, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return env, s
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

type result struct {
	code           int
	stdout, stderr string
}

// cli runs the command line args with env and stdin as its whole environment.
func cli(env map[string]string, stdin string, args ...string) result {
	var out, errOut bytes.Buffer
	code := run(args, func(k string) string { return env[k] }, strings.NewReader(stdin), &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

// must runs a command that has to succeed.
func must(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	r := cli(env, stdin, args...)
	if r.code != 0 {
		t.Fatalf("%v: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
	}
	return r
}

// fails runs a command that has to exit with code, saying something that contains each of want;
// a usage error (2) also prints the usage line.
func fails(t *testing.T, env map[string]string, stdin string, code int, want []string, args ...string) {
	t.Helper()
	r := cli(env, stdin, args...)
	if r.code != code {
		t.Errorf("%v: exit %d, want %d\nstdout: %s\nstderr: %s", args, r.code, code, r.stdout, r.stderr)
		return
	}
	if code == 2 {
		want = append(want, "usage:")
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("%v: stderr %q does not say %q", args, r.stderr, w)
		}
	}
}

func TestCellsAdd(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env, s := database(t)
	r := must(t, env, "", "cells", "add", "eu1", "--upstream", "http://broker:6632/", "--broker-token", "tok", "--tenant", "acme")
	if !strings.Contains(r.stdout, "eu1") {
		t.Errorf("stdout %q does not name the cell", r.stdout)
	}
	must(t, env, "", "cells", "add", "--upstream=https://b2:1", "us1") // flags before the name too
	cells, err := s.Cells(ctx)
	if err != nil || len(cells) != 2 {
		t.Fatalf("cells = %+v, %v", cells, err)
	}
	if c := cells[0]; c.Name != "eu1" || c.Upstream != "http://broker:6632" || c.BrokerToken != "tok" || c.Tenant != "acme" {
		t.Errorf("cell = %+v", c)
	}
	ops, err := s.Operations(ctx, 1)
	if err != nil || len(ops) != 1 || ops[0].Who != "cli:tester" || ops[0].Credential != "cli" || ops[0].Path != "cell/us1" {
		t.Errorf("audit row = %+v, %v; want cli:tester/cli adding us1", ops, err)
	}

	fails(t, env, "", 1, []string{"eu1", "already exists"}, "cells", "add", "eu1", "--upstream", "http://b:1")
	fails(t, env, "", 2, []string{"--upstream is required"}, "cells", "add", "eu2")
	fails(t, env, "", 2, []string{"argument"}, "cells", "add", "--upstream", "http://b:1")
	fails(t, env, "", 2, []string{"argument"}, "cells", "add", "a", "b", "--upstream", "http://b:1")
	fails(t, env, "", 2, []string{"-region"}, "cells", "add", "eu2", "--upstream", "http://b:1", "--region", "x")
	fails(t, env, "", 2, []string{`"EU2"`, "DNS label"}, "cells", "add", "EU2", "--upstream", "http://b:1")
	fails(t, env, "", 2, []string{"no path"}, "cells", "add", "eu2", "--upstream", "http://b:1/api")
	if cells, _ := s.Cells(ctx); len(cells) != 2 {
		t.Fatalf("refused commands changed the cells: %+v", cells)
	}
}

func TestUsersAdd(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env, s := database(t)
	must(t, env, "", "cells", "add", "eu1", "--upstream", "http://b:1")
	const password = "a long pass phrase"
	r := must(t, env, password+"\n", "users", "add", "bob", "--cell", "eu1", "--role", "writer")
	if strings.Contains(r.stdout+r.stderr, password) {
		t.Fatalf("the output shows the password: %q %q", r.stdout, r.stderr)
	}
	u, err := s.CheckPassword(ctx, "bob", password)
	if err != nil || u.Role != "writer" || u.Cell != "eu1" {
		t.Fatalf("CheckPassword = %+v, %v", u, err)
	}
	// A line without its newline and a CRLF line are the same password.
	must(t, env, password, "users", "add", "carol", "--cell", "eu1", "--role", "reader")
	must(t, env, password+"\r\nignored\n", "users", "add", "dave", "--cell", "eu1", "--role", "operator")
	for _, name := range []string{"carol", "dave"} {
		if _, err := s.CheckPassword(ctx, name, password); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	fails(t, env, "", 2, []string{"no password"}, "users", "add", "erin", "--cell", "eu1", "--role", "reader")
	fails(t, env, "short\n", 2, []string{"at least 12"}, "users", "add", "erin", "--cell", "eu1", "--role", "reader")
	fails(t, env, password, 2, []string{`"admin"`}, "users", "add", "erin", "--cell", "eu1", "--role", "admin")
	fails(t, env, password, 2, []string{"--role is required"}, "users", "add", "erin", "--cell", "eu1")
	fails(t, env, password, 1, []string{"nope", "no such cell"}, "users", "add", "erin", "--cell", "nope", "--role", "reader")
	fails(t, env, password, 1, []string{"bob", "already exists"}, "users", "add", "bob", "--cell", "eu1", "--role", "reader")

	// A disabled user cannot sign in and its sessions end; enabled again, it can.
	ses, err := s.CreateSession(ctx, pxdb.User{Name: "bob"}, time.Hour, "192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	if r := must(t, env, "", "users", "disable", "bob"); !strings.Contains(r.stdout, "disabled user bob") {
		t.Errorf("users disable said %q", r.stdout)
	}
	if _, err := s.CheckPassword(ctx, "bob", password); !errors.Is(err, pxdb.ErrBadCredentials) {
		t.Errorf("a disabled user's password: %v, want bad credentials", err)
	}
	if _, err := s.LiveSession(ctx, ses.ID); !errors.Is(err, pxdb.ErrNotFound) {
		t.Errorf("a disabled user's session: %v, want not found", err)
	}
	must(t, env, "", "users", "enable", "bob")
	if _, err := s.CheckPassword(ctx, "bob", password); err != nil {
		t.Errorf("an enabled user's password: %v", err)
	}
	if _, err := s.LiveSession(ctx, ses.ID); !errors.Is(err, pxdb.ErrNotFound) {
		t.Errorf("a session ended by disabling came back on enabling: %v", err)
	}
	fails(t, env, "", 1, []string{"nobody", "not found"}, "users", "disable", "nobody")
	ops, err := s.Operations(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, op := range ops {
		if strings.HasSuffix(op.Method, "able_user") {
			actions = append(actions, op.Method+" "+op.Path)
		}
	}
	if want := []string{"enable_user user/bob", "disable_user user/bob"}; !slices.Equal(actions, want) { // newest first
		t.Errorf("audited %v, want %v", actions, want)
	}
}

func TestKeysCreateListRevoke(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	env, s := database(t)
	must(t, env, "", "cells", "add", "eu1", "--upstream", "http://b:1")

	before := time.Now()
	r := must(t, env, "", "keys", "create", "--cell", "eu1", "--classes", "produce, consume", "--expires", "30d")
	after := time.Now()
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	secret := lines[len(lines)-1]
	if len(lines) < 2 || !regexp.MustCompile(`^qpk_[A-Za-z0-9_-]{43}$`).MatchString(secret) {
		t.Fatalf("the last line is not the key alone:\n%s", r.stdout)
	}
	k, err := s.KeyBySecret(ctx, secret)
	if err != nil {
		t.Fatalf("the printed key does not verify: %v", err)
	}
	if k.Cell != "eu1" || !slices.Equal(k.Classes, []string{"produce", "consume"}) || k.RevokedAt != nil ||
		k.ExpiresAt.Before(before.Add(30*24*time.Hour).Truncate(time.Second)) || k.ExpiresAt.After(after.Add(30*24*time.Hour)) {
		t.Fatalf("key = %+v, want eu1, produce+consume, expiring 30 days after it was made", k)
	}
	if !strings.Contains(r.stdout, k.ID.String()) {
		t.Errorf("the description does not give the key's id:\n%s", r.stdout)
	}

	// The default lifetime is 90 days; a Go duration works too.
	for flagValue, lifetime := range map[string]time.Duration{"": 90 * 24 * time.Hour, "36h": 36 * time.Hour, "90m": 90 * time.Minute} {
		args := []string{"keys", "create", "--cell", "eu1", "--classes", "read"}
		if flagValue != "" {
			args = append(args, "--expires", flagValue)
		}
		before := time.Now()
		r := must(t, env, "", args...)
		after := time.Now()
		lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
		k, err := s.KeyBySecret(ctx, lines[len(lines)-1])
		if err != nil || k.ExpiresAt.Before(before.Add(lifetime).Truncate(time.Second)) || k.ExpiresAt.After(after.Add(lifetime)) {
			t.Errorf("--expires %q: key %+v, %v; want a lifetime of %v", flagValue, k, err, lifetime)
		}
	}

	list := must(t, env, "", "keys", "list").stdout
	rows := strings.Split(strings.TrimRight(list, "\n"), "\n")
	if len(rows) != 5 || !strings.HasPrefix(rows[0], "ID") || !strings.Contains(rows[0], "REVOKED") {
		t.Fatalf("keys list:\n%s", list)
	}
	row := strings.Fields(rows[1])
	if len(row) != 7 || row[0] != k.ID.String() || row[1] != "eu1" || row[2] != "produce,consume" || row[3] != secret[:8] || row[6] != "-" {
		t.Fatalf("first row %q, want the key made first, not revoked", rows[1])
	}
	if strings.Contains(list, secret) {
		t.Fatal("keys list shows a secret")
	}

	must(t, env, "", "keys", "revoke", k.ID.String())
	if k, err := s.KeyBySecret(ctx, secret); err != nil || k.RevokedAt == nil {
		t.Fatalf("after revoke: %+v, %v", k, err)
	}
	row = strings.Fields(strings.Split(must(t, env, "", "keys", "list").stdout, "\n")[1])
	if _, err := time.Parse(time.RFC3339, row[6]); err != nil {
		t.Errorf("revoked column %q after revoke: %v", row[6], err)
	}
	ops, err := s.Operations(ctx, 1)
	if err != nil || len(ops) != 1 || ops[0].Method != "revoke_key" || ops[0].Who != "cli:tester" {
		t.Errorf("audit row = %+v, %v", ops, err)
	}

	unknown := uuid.New().String()
	fails(t, env, "", 1, []string{unknown, "not found"}, "keys", "revoke", unknown)
	fails(t, env, "", 2, []string{"not a UUID"}, "keys", "revoke", "42")
	fails(t, env, "", 2, []string{"argument"}, "keys", "revoke")
	fails(t, env, "", 2, []string{"argument"}, "keys", "list", "extra")
	fails(t, env, "", 2, []string{"--cell is required"}, "keys", "create", "--classes", "read")
	fails(t, env, "", 2, []string{"--classes is required"}, "keys", "create", "--cell", "eu1")
	fails(t, env, "", 2, []string{`"bogus"`}, "keys", "create", "--cell", "eu1", "--classes", "read,bogus")
	fails(t, env, "", 2, []string{`"blocked"`}, "keys", "create", "--cell", "eu1", "--classes", "blocked")
	for _, bad := range []string{"soon", "0d", "-1h", "d", "1.5d", "0s"} {
		fails(t, env, "", 2, []string{"--expires"}, "keys", "create", "--cell", "eu1", "--classes", "read", "--expires", bad)
	}
	fails(t, env, "", 1, []string{"nope", "no such cell"}, "keys", "create", "--cell", "nope", "--classes", "read")
	if keys, _ := s.Keys(ctx); len(keys) != 4 {
		t.Fatalf("refused commands made keys: %d keys", len(keys))
	}
}

func TestCommandLine(t *testing.T) {
	t.Parallel()
	fails(t, nil, "", 2, []string{`unknown command "cells list"`}, "cells", "list")
	fails(t, nil, "", 2, []string{`unknown command "keys"`}, "keys")
	r := cli(nil, "", "help")
	if r.code != 0 || !strings.Contains(r.stdout, "queen-proxy keys create --cell CELL") {
		t.Errorf("help: exit %d, %q", r.code, r.stdout)
	}
	r = cli(nil, "", "keys", "create", "-h")
	if r.code != 0 || !strings.Contains(r.stdout, "usage: queen-proxy keys create") {
		t.Errorf("keys create -h: exit %d, %q", r.code, r.stdout)
	}
	// A malformed variable stops a command before it touches a database, naming the variable.
	fails(t, map[string]string{"PXDB_PORT": "x"}, "", 1, []string{"PXDB_PORT"}, "keys", "list")
}

// With PXDB_HOST unset a command starts the private PostgreSQL in QUEEN_PROXY_DATA_DIR, or uses
// the one that another process (the serving proxy) runs there.
func TestLocalPostgres(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	// Under /tmp, enterable: when we are root the cluster runs as another user.
	dir, err := os.MkdirTemp("/tmp", "queen-proxy-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"QUEEN_PROXY_DATA_DIR": dir, "USER": "tester"}

	must(t, env, "", "cells", "add", "eu1", "--upstream", "http://b:1") // starts and stops it

	cfg, err := config.LoadProxyDB(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	s, err := pxdb.Open(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if cells, err := s.Cells(ctx); err != nil || len(cells) != 1 || cells[0].Name != "eu1" {
		t.Fatalf("the cell did not persist in the data directory: %+v, %v", cells, err)
	}
	r := must(t, env, "", "keys", "create", "--cell", "eu1", "--classes", "read") // while s runs the server
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if _, err := s.KeyBySecret(ctx, lines[len(lines)-1]); err != nil {
		t.Fatalf("the key made beside a running server: %v", err)
	}
	// The command left the server it did not start running.
	if err := s.Pool().Ping(ctx); err != nil {
		t.Fatalf("the command stopped the server it borrowed: %v", err)
	}
}

package pxdb_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"queen/pg/pgtest"
	"queen/proxy/pxdb"
)

// Every change the store makes appends one row saying who made it, with which credential, what
// and on which cell, newest first.
func TestChangesAreAudited(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t)
	cli := pxdb.Actor{Who: "cli:root", Credential: "cli"}
	key := pxdb.Actor{Who: "key:42", Credential: "api_key:42"}
	if err := s.AddCell(ctx, pxdb.Cell{Name: "eu1", Upstream: "http://b:1"}, cli); err != nil {
		t.Fatal(err)
	}
	k, _, err := s.CreateKey(ctx, "eu1", []string{"read"}, time.Now().Add(time.Hour), admin)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeKey(ctx, k.ID, key); err != nil {
		t.Fatal(err)
	}
	if err := s.AddUser(ctx, pxdb.User{Name: "bob", Cell: "eu1", Role: "reader"}, "twelve chars", cli); err != nil {
		t.Fatal(err)
	}
	// Refused changes leave no row.
	_ = s.AddCell(ctx, pxdb.Cell{Name: "eu1", Upstream: "http://b:1"}, cli)
	_, _, _ = s.CreateKey(ctx, "nope", []string{"read"}, time.Now().Add(time.Hour), cli)

	ops, err := s.Operations(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []pxdb.Operation{
		{Who: "cli:root", Credential: "cli", Cell: "eu1", Method: "add_user", Path: "user/bob", Class: "control"},
		{Who: "key:42", Credential: "api_key:42", Cell: "eu1", Method: "revoke_key", Path: "key/" + k.ID.String(), Class: "control"},
		{Who: "alice", Credential: "session", Cell: "eu1", Method: "create_key", Path: "key/" + k.ID.String(), Class: "control"},
		{Who: "cli:root", Credential: "cli", Cell: "eu1", Method: "add_cell", Path: "cell/eu1", Class: "control"},
	}
	if len(ops) != len(want) {
		t.Fatalf("operations = %+v, want %d rows", ops, len(want))
	}
	for i := range want {
		if ops[i].ID == 0 || ops[i].At.IsZero() || (i > 0 && ops[i].ID >= ops[i-1].ID) {
			t.Errorf("row %d: id %d, at %v: want ids decreasing and a time", i, ops[i].ID, ops[i].At)
		}
		want[i].ID, want[i].At = ops[i].ID, ops[i].At
		if ops[i] != want[i] {
			t.Errorf("row %d = %+v, want %+v", i, ops[i], want[i])
		}
	}
}

// Record appends what the serving side tells it, and the database dates it.
func TestRecordAndOperations(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t)
	before := time.Now().Add(-time.Minute)
	for i, path := range []string{"/api/v1/push", "/api/v1/resources/queues/q"} {
		op := pxdb.Operation{ID: 999, At: time.Unix(0, 0), Who: "bob", Credential: "session", Cell: "eu1",
			Method: "POST", Path: path, Class: "produce", Status: 200 + i, RequestID: "req-" + path}
		if err := s.Record(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	ops, err := s.Operations(ctx, 1)
	if err != nil || len(ops) != 1 {
		t.Fatalf("Operations(1) = %+v, %v", ops, err)
	}
	got := ops[0]
	if got.Path != "/api/v1/resources/queues/q" || got.Status != 201 || got.RequestID != "req-/api/v1/resources/queues/q" ||
		got.Who != "bob" || got.Credential != "session" || got.Cell != "eu1" || got.Method != "POST" || got.Class != "produce" {
		t.Fatalf("newest operation = %+v", got)
	}
	if got.ID == 999 || got.At.Before(before) {
		t.Fatalf("the caller chose the id or the time: %+v", got)
	}
	if _, err := s.Operations(ctx, 0); !errors.Is(err, pxdb.ErrInvalid) {
		t.Fatalf("Operations(0): %v, want ErrInvalid", err)
	}
}

// Through the store's pool (role queen_proxy_app) the audit trail takes INSERT and SELECT and
// refuses UPDATE, DELETE and TRUNCATE for want of the privilege; as the tables' owner, who has
// every privilege, the trigger refuses them.
func TestOperationsAreAppendOnly(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, cs := newStore(t)
	pool := s.Pool()
	var role string
	if err := pool.QueryRow(ctx, "SELECT current_user").Scan(&role); err != nil || role != "queen_proxy_app" {
		t.Fatalf("the pool runs as %q (%v), want queen_proxy_app", role, err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO queen_proxy.operations (who, credential, method, path, class, status)
		VALUES ('t', 't', 'GET', '/', 'read', 200)`); err != nil {
		t.Fatalf("INSERT as the application role: %v", err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM queen_proxy.operations").Scan(&n); err != nil || n != 1 {
		t.Fatalf("SELECT as the application role: %d, %v", n, err)
	}
	// The same statements succeed on another table, so what refuses them is the audit table's
	// protection, not the statements.
	if _, err := pool.Exec(ctx, "UPDATE queen_proxy.cells SET tenant = '' WHERE false"); err != nil {
		t.Fatalf("UPDATE of cells as the application role: %v", err)
	}
	refused := []string{
		"UPDATE queen_proxy.operations SET status = 500",
		"DELETE FROM queen_proxy.operations",
		"TRUNCATE queen_proxy.operations",
	}
	for _, q := range refused {
		if _, err := pool.Exec(ctx, q); !isSQLState(err, "42501") {
			t.Errorf("%s as the application role: %v, want insufficient_privilege", q, err)
		}
	}

	owner, err := pgx.Connect(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(context.Background())
	if err := owner.QueryRow(ctx, "SELECT current_user").Scan(&role); err != nil || role == "queen_proxy_app" {
		t.Fatalf("the owner's connection runs as %q (%v)", role, err)
	}
	for _, q := range refused {
		if _, err := owner.Exec(ctx, q); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s as the owner: %v, want the append-only trigger's refusal", q, err)
		}
	}
	if err := owner.QueryRow(ctx, "SELECT count(*) FROM queen_proxy.operations WHERE status = 200").Scan(&n); err != nil || n != 1 {
		t.Fatalf("after the refusals the row reads %d, %v; want it unchanged", n, err)
	}
}

func isSQLState(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}

// No statement of the proxy's code deletes, updates or truncates the audit trail (the tests do,
// to see it refused).
func TestNoCodeChangesOperations(t *testing.T) {
	t.Parallel()
	forbidden := regexp.MustCompile(`(?is)\b(DELETE\s+FROM|UPDATE|TRUNCATE(\s+TABLE)?(\s+ONLY)?)\s+("?queen_proxy"?\s*\.\s*)?"?operations\b`)
	var files []string
	for _, pattern := range []string{"migrations/*.sql", "../*.go", "../*/*.go", "../../cmd/queen-proxy/*.go"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	seen := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		seen++
		if m := forbidden.Find(b); m != nil {
			t.Errorf("%s changes the audit trail: %s", f, m)
		}
	}
	if seen < 5 {
		t.Fatalf("read only %d files: the globs are wrong", seen)
	}
}

// When the connecting user may neither create queen_proxy_app nor take it, the store still
// opens, runs as that user and says so; a user with CREATEROLE grants itself the role.
func TestApplicationRoleFallback(t *testing.T) {
	t.Parallel()
	if os.Getenv("PG_HOST") != "" {
		t.Skip("needs roles that log in without a password: the throwaway cluster's trust authentication")
	}
	ctx := testContext(t)
	_, cs := newStore(t) // the role exists from here on
	owner, err := pgx.Connect(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(context.Background())
	for _, c := range []struct {
		attrs    string
		wantRole func(user string) string
		warns    bool
	}{
		{"LOGIN", func(user string) string { return user }, true},
		{"LOGIN CREATEROLE", func(string) string { return "queen_proxy_app" }, false},
	} {
		var b [4]byte
		_, _ = rand.Read(b[:])
		user := "pxdb_user_" + hex.EncodeToString(b[:])
		db := pgtest.NewDatabase(t)
		dbName := db[strings.LastIndex(db, "dbname=")+len("dbname="):]
		dbName, _, _ = strings.Cut(dbName, " ")
		for _, q := range []string{
			"CREATE ROLE " + user + " " + c.attrs,
			"GRANT CREATE ON DATABASE " + pgx.Identifier{dbName}.Sanitize() + " TO " + user,
		} {
			if _, err := owner.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		s, logs := openStore(t, strings.Replace(db, "user=postgres", "user="+user, 1))
		var role, session string
		if err := s.Pool().QueryRow(ctx, "SELECT current_user, session_user").Scan(&role, &session); err != nil {
			t.Fatal(err)
		}
		if session != user || role != c.wantRole(user) {
			t.Errorf("%s: pool runs as %s (session %s), want %s", c.attrs, role, session, c.wantRole(user))
		}
		if warned := strings.Contains(logs.String(), "runs as the connecting user"); warned != c.warns {
			t.Errorf("%s: warned %v, want %v; logs:\n%s", c.attrs, warned, c.warns, logs)
		}
		// Either way the store works.
		if err := s.AddCell(ctx, pxdb.Cell{Name: "eu1", Upstream: "http://b:1"}, admin); err != nil {
			t.Errorf("%s: AddCell: %v", c.attrs, err)
		}
	}
}

// PUBLIC holds no privilege on the schema, its tables and sequences, or the trigger function: a
// role of the cluster that was granted nothing reads nothing.
func TestNothingIsGrantedToPublic(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	_, cs := newStore(t)
	owner, err := pgx.Connect(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(context.Background())
	// acldefault is what a NULL acl means: nothing for PUBLIC on schemas, tables and sequences,
	// EXECUTE on functions.
	rows, err := owner.Query(ctx, `
		SELECT 'schema: ' || a.privilege_type
		FROM pg_namespace n, aclexplode(COALESCE(n.nspacl, acldefault('n', n.nspowner))) a
		WHERE n.nspname = 'queen_proxy' AND a.grantee = 0
		UNION ALL
		SELECT c.relname || ': ' || a.privilege_type
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
		     aclexplode(COALESCE(c.relacl, acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char", c.relowner))) a
		WHERE n.nspname = 'queen_proxy' AND a.grantee = 0
		UNION ALL
		SELECT p.proname || ': ' || a.privilege_type
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace,
		     aclexplode(COALESCE(p.proacl, acldefault('f', p.proowner))) a
		WHERE n.nspname = 'queen_proxy' AND a.grantee = 0`)
	if err != nil {
		t.Fatal(err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(found) > 0 {
		t.Fatalf("PUBLIC holds privileges in queen_proxy: %v", found)
	}
}

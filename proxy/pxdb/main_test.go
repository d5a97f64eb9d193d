package pxdb_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"queen/pg/pgtest"
	"queen/proxy/pxdb"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// openStore opens a store on connString, closed when t ends, and returns what its opening
// logged (read it after: a bytes.Buffer is not for concurrent use).
func openStore(t *testing.T, connString string) (*pxdb.Store, *bytes.Buffer) {
	t.Helper()
	logs := &bytes.Buffer{}
	s, err := pxdb.OpenConn(testContext(t), connString, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatalf("OpenConn: %v", err)
	}
	t.Cleanup(s.Close)
	return s, logs
}

// newStore opens a store on a fresh database and returns it with the database's conn string
// (which connects as the owner of the tables).
func newStore(t *testing.T) (*pxdb.Store, string) {
	t.Helper()
	cs := pgtest.NewDatabase(t)
	s, _ := openStore(t, cs)
	return s, cs
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var admin = pxdb.Actor{Who: "alice", Credential: "session"}

// addCell adds a valid cell or fails the test.
func addCell(t *testing.T, s *pxdb.Store, name string) {
	t.Helper()
	if err := s.AddCell(testContext(t), pxdb.Cell{Name: name, Upstream: "http://127.0.0.1:6632"}, admin); err != nil {
		t.Fatalf("AddCell %s: %v", name, err)
	}
}

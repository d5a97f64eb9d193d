package server_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"queen/pg/localpg"
	"queen/testkit"
)

// startReplicatedPair starts a primary and a hot standby streaming from it synchronously: the
// primary acknowledges a commit only once the standby has it on disk, so whatever a broker was
// told is committed survives the primary's loss.
func startReplicatedPair(t *testing.T) (primary, standby *localpg.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	primary, err := localpg.Start(ctx, localpg.Options{DataDir: clusterDir(t, "queen-primary-"), Logger: log,
		Settings: map[string]string{"wal_level": "replica", "synchronous_standby_names": "'*'", "synchronous_commit": "on"}})
	if err != nil {
		t.Fatalf("cannot start the primary: %v", err)
	}
	t.Cleanup(func() {
		if err := primary.Stop(); err != nil {
			t.Errorf("stop the primary: %v", err)
		}
	})
	standby, err = localpg.Start(ctx, localpg.Options{DataDir: clusterDir(t, "queen-standby-"), Logger: log, Standby: primary})
	if err != nil {
		t.Fatalf("cannot start the standby: %v", err)
	}
	t.Cleanup(func() {
		if err := standby.Stop(); err != nil {
			t.Errorf("stop the standby: %v", err)
		}
	})
	return primary, standby
}

// socketOf is the address a broker logs for a server reached over its unix socket.
func socketOf(c *localpg.Cluster) string { return filepath.Join(c.SocketDir(), ".s.PGSQL.5432") }

// TestFailoverToSynchronousStandby runs two brokers whose PG_HOST lists a synchronous standby
// and its primary, under the outage load (producers and consumers on both brokers), kills the
// primary (SIGKILL to every process) and promotes the standby three seconds later, as a
// failover manager would once sure the primary is gone: meanwhile the brokers meet a standby
// that refuses writes. The standby comes first in the
// list: a broker must find the server that accepts writes, not take the first that answers.
// Every push answered queued or buffered is delivered exactly once to each consumer group, in
// order per partition, every ack holds on the new primary, pops and acks are answered 503 while
// there is none, and each broker logs the change of server. The time from the kill to the
// first push queued on the new primary is the time to recover.
func TestFailoverToSynchronousStandby(t *testing.T) {
	skipLong(t)
	primary, standby := startReplicatedPair(t)
	env := map[string]string{
		"PG_HOST": standby.SocketDir() + "," + primary.SocketDir(), "PG_PORT": "5432", "PG_USER": "postgres", "PG_DB": "postgres",
		"FILE_BUFFER_DB_WAIT_MS": strconv.FormatInt(outageWait.Milliseconds(), 10), "FILE_BUFFER_FLUSH_MS": "50", "QUEEN_BIND_ADDR": "127.0.0.1",
	}
	var (
		brokers []outageBroker
		logs    []*testkit.LogBuffer
	)
	for _, name := range []string{"failover-a", "failover-b"} {
		env["QUEEN_SERVER_ID"] = name
		n, err, l := bootAgainst(t, env)
		if err != nil {
			t.Fatalf("%s: boot: %v\n%s", name, err, l)
		}
		if want := `msg="connected to PostgreSQL" server=` + socketOf(primary); !strings.Contains(l.String(), want) {
			t.Fatalf("%s: the boot log lacks %q:\n%s", name, want, l)
		}
		brokers = append(brokers, outageBroker{doer: n, base: n.base, broker: n.broker})
		logs = append(logs, l)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var promotion time.Duration
	res := runOutage(t, outageScenario{
		name:    "killed, its standby to be promoted",
		brokers: brokers,
		down: func(t *testing.T) {
			requireSyncStandby(ctx, t, primary.ConnString("postgres"))
			if err := primary.Kill(); err != nil {
				t.Fatal(err)
			}
		},
		up: func(t *testing.T) {
			t0 := time.Now()
			if err := standby.Promote(ctx); err != nil {
				t.Fatal(err)
			}
			promotion = time.Since(t0)
		},
		hold:          3 * time.Second,
		clientTimeout: 5 * time.Second,
		reportsDB:     true,
	})
	t.Logf("time to recover: %v from the kill to the first push queued on the new primary (the promotion took %v of it, the brokers %v after it)",
		res.firstQueuedAt.Sub(res.downAt).Round(time.Millisecond), promotion.Round(time.Millisecond),
		res.firstQueuedAt.Sub(res.upAt).Round(time.Millisecond))

	for i, l := range logs {
		want := `server=` + socketOf(standby) + ` previous=` + socketOf(primary)
		if s := l.String(); !strings.Contains(s, `msg="PostgreSQL server changed`) || !strings.Contains(s, want) {
			t.Errorf("broker %d did not log the change of server (%q):\n%s", i, want, s)
		}
	}
}

// requireSyncStandby checks that the primary connString reaches has a synchronous standby:
// every commit so far waited for it, so it holds all the brokers were told.
func requireSyncStandby(ctx context.Context, t *testing.T, connString string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'").Scan(&n); err != nil || n == 0 {
		t.Fatalf("%d synchronous standbys on the primary (%v): want one", n, err)
	}
}

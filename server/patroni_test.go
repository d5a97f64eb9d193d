package server_test

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"queen/pg/patroni"
	"queen/testkit"
)

// startPatroni starts a three-node Patroni cluster with synchronous replication for the test
// (pg/patroni), stopped when the test ends, after the brokers started later.
func startPatroni(t *testing.T) *patroni.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := patroni.Start(ctx, patroni.Options{Dir: clusterDir(t, "queen-patroni-"), Log: log})
	if err != nil {
		t.Fatalf("cannot start the patroni cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("patroni logs:\n%s", c.LogTails())
		}
		c.Stop()
	})
	return c
}

// healthWatch polls a broker's /health and records each change of answer, with its time: what
// a load balancer's readiness probe sees during a failover.
type healthWatch struct {
	mu      sync.Mutex
	changes []string
	stop    chan struct{}
	done    chan struct{}
}

func watchHealth(base string) *healthWatch {
	w := &healthWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		hc := &http.Client{Timeout: 3 * time.Second}
		last, t0 := "", time.Now()
		for pause(w.stop, 100*time.Millisecond) {
			status, body, err := rawDo(hc, base, "GET", "/health", nil)
			now := strconv.Itoa(status) + " " + strings.TrimSpace(string(body))
			if err != nil {
				now = "no answer: " + err.Error()
			}
			if now != last {
				w.mu.Lock()
				w.changes = append(w.changes, time.Since(t0).Round(100*time.Millisecond).String()+": "+now)
				w.mu.Unlock()
				last = now
			}
		}
	}()
	return w
}

func (w *healthWatch) end() []string {
	close(w.stop)
	<-w.done
	return w.changes
}

// TestPatroniSwitchoverFailoverAndRejoin runs two brokers whose PG_HOST lists the three nodes of
// a Patroni cluster (synchronous_mode) under the outage load (producers and consumers on both),
// through the three events of a Patroni deployment's life:
//   - a planned switchover (patronictl switchover: Patroni's REST API) to the synchronous
//     standby;
//   - the loss of the primary: Patroni and every PostgreSQL process of its node get SIGKILL;
//     Patroni promotes the synchronous standby once the leader key's ttl runs out;
//   - the killed node started again: it rejoins as a replica of the new timeline, becomes the
//     synchronous standby when the other replica restarts, and a switchover back to it.
//
// Each time, every push answered queued or buffered is delivered exactly once to each group in
// order per partition, and every ack holds (runOutage). The log gives, per event, the pops and
// acks refused (503) and for how long, the time to the first push stored after the event, and
// what /health answered meanwhile.
func TestPatroniSwitchoverFailoverAndRejoin(t *testing.T) {
	skipLong(t)
	c := startPatroni(t)
	env := map[string]string{
		"PG_HOST": c.Hosts(), "PG_USER": "postgres", "PG_PASSWORD": c.Password(), "PG_DB": "postgres",
		"FILE_BUFFER_DB_WAIT_MS": strconv.FormatInt(outageWait.Milliseconds(), 10), "FILE_BUFFER_FLUSH_MS": "50", "QUEEN_BIND_ADDR": "127.0.0.1",
	}
	var brokers []outageBroker
	for _, name := range []string{"patroni-a", "patroni-b"} {
		env["QUEEN_SERVER_ID"] = name
		n, err, l := bootAgainst(t, env)
		if err != nil {
			t.Fatalf("%s: boot: %v\n%s", name, err, l)
		}
		brokers = append(brokers, outageBroker{doer: n, base: n.base, broker: n.broker})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	leaderOf := func(t *testing.T) *patroni.Node {
		n, err := c.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	syncOf := func(t *testing.T) *patroni.Node {
		n, err := c.SyncStandby(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	event := func(t *testing.T, sc outageScenario) {
		sc.brokers, sc.clientTimeout = brokers, 5*time.Second
		h := watchHealth(brokers[0].base)
		res := runOutage(t, sc)
		t.Logf("%s: pops and acks refused %d times over %v; first push stored %v after the event began; /health of %s: %s",
			sc.name, res.refused, res.refusedFor().Round(time.Millisecond), res.firstQueuedAt.Sub(res.downAt).Round(time.Millisecond),
			brokers[0].base, strings.Join(h.end(), " | "))
	}

	// switchover moves the primary to node to under the load, on a queue of its own.
	switchover := func(t *testing.T, to *patroni.Node, queue string) {
		from := leaderOf(t)
		event(t, outageScenario{
			name: "switched over from " + from.Name + " to " + to.Name, queue: queue, brief: true,
			down: func(t *testing.T) {
				if err := c.Switchover(ctx, to); err != nil {
					t.Fatal(err)
				}
			},
			up: func(t *testing.T) {
				if err := c.WaitHealthy(ctx, from.Name); err != nil {
					t.Fatal(err)
				}
			},
		})
		if l := leaderOf(t); l != to {
			t.Errorf("leader after the switchover: %s, want %s", l.Name, to.Name)
		}
	}

	t.Run("switchover", func(t *testing.T) { switchover(t, syncOf(t), "switchover") })

	var killed *patroni.Node
	t.Run("primary killed", func(t *testing.T) {
		killed = leaderOf(t)
		standby := syncOf(t)
		var killedAt time.Time
		var promotion time.Duration
		event(t, outageScenario{
			name: "primary " + killed.Name + " killed", queue: "killed", reportsDB: true,
			down: func(t *testing.T) {
				requireSyncStandby(ctx, t, c.ConnString("postgres"))
				killedAt = time.Now()
				if err := killed.Kill(); err != nil {
					t.Fatal(err)
				}
			},
			up: func(t *testing.T) {
				testkit.WaitFor(t, 2*time.Minute, "Patroni to promote the synchronous standby", func() bool {
					l, err := c.Leader(ctx)
					return err == nil && l != killed
				})
				promotion = time.Since(killedAt)
			},
		})
		if l := leaderOf(t); l != standby {
			t.Errorf("Patroni promoted %s, want the synchronous standby %s", l.Name, standby.Name)
		}
		t.Logf("Patroni promoted %s %v after the kill (ttl %d s, loop_wait %d s, retry_timeout %d s)", standby.Name,
			promotion.Round(time.Millisecond), patroni.DefaultTiming.TTL, patroni.DefaultTiming.LoopWait, patroni.DefaultTiming.RetryTimeout)
	})
	if killed == nil {
		t.FailNow()
	}

	t.Run("rejoin and switch back", func(t *testing.T) {
		if err := killed.Start(); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitHealthy(ctx, ""); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s rejoined; its log says of pg_rewind: %q", killed.Name, rewindLines(killed.Log()))
		// Patroni hands the synchronous role to the rejoined node once the other replica goes
		// away: only the synchronous standby may be switched over to.
		if other := syncOf(t); other != killed {
			if err := other.Stop(); err != nil {
				t.Fatal(err)
			}
			testkit.WaitFor(t, time.Minute, "the rejoined node to become the synchronous standby", func() bool {
				n, err := c.SyncStandby(ctx)
				return err == nil && n == killed
			})
			if err := other.Start(); err != nil {
				t.Fatal(err)
			}
			if err := c.WaitHealthy(ctx, ""); err != nil {
				t.Fatal(err)
			}
		}
		switchover(t, killed, "back")
	})
}

// rewindLines are the lines of a Patroni log that mention pg_rewind.
func rewindLines(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(strings.ToLower(l), "rewind") {
			out = append(out, l)
		}
	}
	return out
}

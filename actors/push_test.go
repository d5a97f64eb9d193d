package actors

import (
	"bytes"
	"testing"
	"testing/synctest"
	"time"

	"queen/fusion"
	"queen/persistence"
	"queen/pg/pgtest"
	"queen/spool"
)

// The actors against the real database, real push lanes and a real spool, on the real clock:
// a parked long-poll gets the message of a push to its queue as soon as the push commits.
func TestPushCommitDeliversToParkedPop(t *testing.T) {
	pool, _ := pgtest.NewPool(t)
	store := persistence.NewStore(pool)
	lanes := fusion.NewLanes(fusion.Options{MaxItems: 100, InFlight: 2}, store.Push, persistence.IsUnavailable, persistence.PushLaneKey)
	defer lanes.Close()
	sp, err := spool.Open(spool.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	deps := testDeps(store, lanes, sp)
	deps.SpoolAfter = time.Minute
	s := Start(deps)
	defer s.Stop()

	// The router hands both to the queue's actor in this order: the pop is parked first.
	waiting := park(s, popOf("e2e", "g"), time.Now().Add(time.Minute))
	push := pushOf("e2e", "p1")
	s.Push(push)

	pr := <-push.Reply
	if pr.Err != nil || pr.Buffered || len(pr.Results) != 1 || pr.Results[0].Status != persistence.StatusQueued {
		t.Fatalf("push answered %+v, want one queued result", pr)
	}
	got := <-waiting
	if got.Err != nil || got.TimedOut || len(got.Result.Messages) != 1 {
		t.Fatalf("parked pop answered %+v, want the pushed message", got)
	}
	m := got.Result.Messages[0]
	if m.ID != pr.Results[0].MessageID || m.TransactionID != "e2e/p1" || m.Partition.Name != "p1" ||
		!bytes.Equal(m.Payload, push.Items[0].Payload) {
		t.Fatalf("parked pop got %+v, want message %s of the push", m, pr.Results[0].MessageID)
	}
	if got.Queue != (persistence.QueueName{Name: "e2e"}) {
		t.Fatalf("answered for queue %q", got.Queue)
	}
}

// A push PostgreSQL refuses as unreachable is answered from the disk spool, and the broker
// marks the database down: the next push goes to the spool without trying it.
func TestUnreachableDatabaseSendsPushesToTheSpool(t *testing.T) {
	pool, _ := pgtest.NewPool(t)
	store := persistence.NewStore(pool)
	lanes := fusion.NewLanes(fusion.Options{MaxItems: 100, InFlight: 1}, store.Push, persistence.IsUnavailable, persistence.PushLaneKey)
	defer lanes.Close()
	pool.Close() // every query now fails as unavailable
	sp, err := spool.Open(spool.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	deps := testDeps(store, lanes, sp)
	deps.SpoolAfter = time.Hour // the refusal, not the deadline, must spool it
	s := Start(deps)
	defer s.Stop()

	first := pushOf("down", "p1", "p2")
	s.Push(first)
	if r := <-first.Reply; r.Err != nil || !r.Buffered {
		t.Fatalf("push to an unreachable database answered %+v, want Buffered", r)
	}
	if deps.DBHealthy.Load() {
		t.Fatal("the database is still marked healthy after refusing a push as unreachable")
	}
	second := pushOf("down", "p3")
	s.Push(second)
	if r := <-second.Reply; r.Err != nil || !r.Buffered {
		t.Fatalf("push while the database is down answered %+v, want Buffered", r)
	}
	checkSpooled(t, sp, "down/p1", "down/p2", "down/p3")
}

// A push PostgreSQL does not answer within SpoolAfter is answered Buffered from the spool; when
// PostgreSQL commits it after all, the commit still wakes the pops parked on its queue.
func TestSlowPushIsSpooledAndItsLateCommitWakesParkedPops(t *testing.T) {
	p := newPG(t)
	synctest.Test(t, func(t *testing.T) {
		b := startBroker(t, p, nil)
		b.gate.hold(false, true)
		waiting := park(b.System, popOf("slow", "g"), time.Now().Add(time.Hour))
		push := pushOf("slow", "p1")
		b.Push(push)

		advance(b.deps.SpoolAfter - time.Nanosecond)
		if r, ok := received(push.Reply); ok {
			t.Fatalf("push answered %+v before SpoolAfter", r)
		}
		advance(time.Nanosecond)
		if r, ok := received(push.Reply); !ok || r.Err != nil || !r.Buffered || r.Results != nil {
			t.Fatalf("push unanswered by PostgreSQL for SpoolAfter answered %+v (%v), want Buffered", r, ok)
		}
		if st := b.spool.Stats(); st.Records != 1 {
			t.Fatalf("spool holds %d records, want the push's 1", st.Records)
		}
		if r, ok := received(waiting); ok {
			t.Fatalf("parked pop answered %+v before anything committed", r)
		}

		b.gate.releasePushes() // PostgreSQL commits the push late
		synctest.Wait()
		got, ok := received(waiting)
		if !ok {
			t.Fatal("the late commit did not wake the parked pop")
		}
		if got.Err != nil || len(got.Result.Messages) != 1 || got.Result.Messages[0].TransactionID != "slow/p1" {
			t.Fatalf("woken pop answered %+v, want message slow/p1", got)
		}
		if r, ok := received(push.Reply); ok {
			t.Fatalf("the late commit answered the client a second time: %+v", r)
		}
		if !b.deps.DBHealthy.Load() {
			t.Fatal("a commit left the database marked down")
		}
		checkSpooled(t, b.spool, "slow/p1")
	})
}

// checkSpooled asserts the spool holds items of these transaction ids, in order.
func checkSpooled(t *testing.T, sp *spool.Spool, txIDs ...string) {
	t.Helper()
	items := spooled(t, sp)
	if len(items) != len(txIDs) {
		t.Fatalf("spool holds %d items, want %d", len(items), len(txIDs))
	}
	for i, it := range items {
		if it.TransactionID != txIDs[i] {
			t.Fatalf("spooled item %d is %s, want %s", i, it.TransactionID, txIDs[i])
		}
	}
}

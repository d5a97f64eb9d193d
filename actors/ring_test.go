package actors

import (
	"testing"
	"testing/synctest"

	"queen/persistence"
)

// The wildcard pops of a group start one after another, each from where the one before
// reported its search reached (here, as the test's gate passes reports on, once that pop is
// done): a pop that came while another's search ran waits for it instead of reading and
// trying to claim what that one holds. Another group's pops are not held.
func TestWildcardPopsOfAGroupStartOneAfterAnother(t *testing.T) {
	p := newPG(t)
	p.storeAsAnotherBroker(t, pushOf("rq", "a", "b", "c", "d"))
	synctest.Test(t, func(t *testing.T) {
		b := startBroker(t, p, nil)
		b.gate.hold(true, false)
		b.gate.reportLate = true
		pop := func(group string) chan PopReply {
			reply := make(chan PopReply, 1)
			b.Pop(&PopRequest{Pop: popOf("rq", group), Reply: reply})
			synctest.Wait()
			return reply
		}
		// next releases the one pop at the gate, which must resume from after want.
		next := func(want string) {
			t.Helper()
			held := b.gate.takePops()
			if len(held) != 1 || held[0].req.Resume.Partition != want || held[0].req.Resume.Claimed != (want != "") {
				t.Fatalf("pops at the gate: %+v; want one, resuming after %q", held, want)
			}
			close(held[0].release)
			synctest.Wait()
		}
		claimed := func(reply chan PopReply) string {
			t.Helper()
			r, ok := received(reply)
			if !ok || len(r.Result.Partitions) != 1 {
				t.Fatalf("pop answered %+v, %v; want one partition", r, ok)
			}
			return r.Result.Partitions[0].Name
		}

		first, second, third := pop(persistence.QueueMode), pop(persistence.QueueMode), pop(persistence.QueueMode)
		other := pop("g")
		if held := b.gate.takePops(); len(held) != 2 || held[0].req.Group != persistence.QueueMode || held[1].req.Group != "g" {
			t.Fatalf("pops at the gate: %+v; want the group's first and the other group's", held)
		} else {
			close(held[1].release)
			close(held[0].release)
			synctest.Wait()
		}
		if got := claimed(other); got != "a" {
			t.Fatalf("the other group's pop claimed %s, want a", got)
		}
		if got := claimed(first); got != "a" {
			t.Fatalf("the first pop claimed %s, want a", got)
		}
		next("a")
		if got := claimed(second); got != "b" {
			t.Fatalf("the second pop claimed %s, want b", got)
		}
		next("b")
		if got := claimed(third); got != "c" {
			t.Fatalf("the third pop claimed %s, want c", got)
		}
	})
}

// A pop's reports move its group's position, unless a pop started after it has reported:
// that one searched from further on, past what the older one claims.
func TestOlderPopDoesNotMoveThePositionBack(t *testing.T) {
	a := &queueActor{rings: map[string]*ring{}}
	pop := func(dispatch uint64) *waiter {
		return &waiter{req: &PopRequest{Pop: popOf("rq", persistence.QueueMode)}, dispatch: dispatch}
	}
	at := func(name string) persistence.RingPosition {
		return persistence.RingPosition{Partition: name, Claimed: true}
	}
	older, newer := pop(1), pop(2)
	for _, step := range []struct {
		w    *waiter
		pos  string
		want string
	}{
		{older, "a", "a"},
		{newer, "d", "d"},
		{older, "b", "d"}, // the older pop's later report, or its answer
		{newer, "e", "e"}, // the newer pop's own later report
	} {
		a.advance(step.w, at(step.pos))
		if got := a.rings[persistence.QueueMode].pos.Partition; got != step.want {
			t.Fatalf("after pop %d reported %s the position is %s, want %s", step.w.dispatch, step.pos, got, step.want)
		}
	}
}

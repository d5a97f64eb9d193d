package actors

import (
	"testing"
	"testing/synctest"

	"queen/persistence"
)

// Each wildcard pop of a group starts where the group's last pop returned: the queue actor
// hands the position on. A pop overtaken by one that started after it does not move the
// position back: here the second pop claims a and comes back first, the first claims b (a is
// leased), and the third pop starts after a, not after b.
func TestWildcardPopsGoOnFromTheLastPosition(t *testing.T) {
	p := newPG(t)
	p.storeAsAnotherBroker(t, pushOf("rq", "a", "b", "c", "d"))
	synctest.Test(t, func(t *testing.T) {
		b := startBroker(t, p, nil)
		b.gate.hold(true, false)
		pop := func() chan PopReply {
			reply := make(chan PopReply, 1)
			b.Pop(&PopRequest{Pop: popOf("rq", persistence.QueueMode), Reply: reply})
			synctest.Wait()
			return reply
		}
		// run releases the held pops in the order given, each after the one before is done.
		run := func(held ...heldPop) {
			for _, h := range held {
				close(h.release)
				synctest.Wait()
			}
		}
		claimed := func(reply chan PopReply) string {
			r, ok := received(reply)
			if !ok || len(r.Result.Partitions) != 1 {
				t.Fatalf("pop answered %+v, %v; want one partition", r, ok)
			}
			return r.Result.Partitions[0].Name
		}

		first, second := pop(), pop()
		held := b.gate.takePops()
		if len(held) != 2 || held[0].req.Resume != (persistence.RingPosition{}) || held[1].req.Resume != (persistence.RingPosition{}) {
			t.Fatalf("the first pops of a group must start at the first partition: %+v", held)
		}
		run(held[1], held[0])
		if got := [2]string{claimed(first), claimed(second)}; got != [2]string{"b", "a"} {
			t.Fatalf("first and second pops claimed %v, want [b a]", got)
		}

		third := pop()
		held = b.gate.takePops()
		if len(held) != 1 || !held[0].req.Resume.Claimed || held[0].req.Resume.Partition != "a" {
			t.Fatalf("the third pop resumes from %+v, want after a", held[0].req.Resume)
		}
		run(held...)
		if got := claimed(third); got != "c" {
			t.Fatalf("the third pop claimed %s, want c", got)
		}
		pop()
		if held = b.gate.takePops(); held[0].req.Resume.Partition != "c" {
			t.Fatalf("the fourth pop resumes from %+v, want after c", held[0].req.Resume)
		}
		run(held...)
	})
}

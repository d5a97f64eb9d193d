package actors

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"queen/persistence"
)

// A wake-up naming partitions re-runs, per consumer group, at most as many parked pops as
// partitions received data, and none filtered on another partition; one naming no partition
// re-runs one pop per key.
func TestWakeReRunsAtMostOnePopPerPartitionAndGroup(t *testing.T) {
	p := newPG(t)
	p.storeAsAnotherBroker(t, pushOf("wq", "p1", "p2"))
	filtered := func(group, partition string) persistence.PopRequest {
		r := popOf("wq", group)
		r.Partition = partition
		return r
	}
	parkAll := func(b *broker) {
		for range 5 {
			park(b.System, popOf("wq", "g"), time.Now().Add(time.Hour))
		}
		park(b.System, filtered("g", "p1"), time.Now().Add(time.Hour))
		park(b.System, filtered("g", "p3"), time.Now().Add(time.Hour))
		for range 3 {
			park(b.System, popOf("wq", "h"), time.Now().Add(time.Hour))
		}
		synctest.Wait()
		if got := b.gate.takePops(); len(got) != 0 {
			t.Fatalf("%d database pops before any wake-up: the pops were parked as checked", len(got))
		}
	}

	synctest.Test(t, func(t *testing.T) {
		b := startBroker(t, p, nil)
		b.gate.hold(true, false)
		parkAll(b)
		b.Wake(persistence.QueueName{Name: "wq"}, []string{"p1", "p2"})
		synctest.Wait()
		perGroup := map[string]int{}
		for _, h := range b.gate.takePops() {
			perGroup[h.req.Group]++
			if h.req.Partition == "p3" {
				t.Error("a wake-up of p1 and p2 re-ran a pop filtered on p3")
			}
		}
		if perGroup["g"] != 2 || perGroup["h"] != 2 {
			t.Fatalf("a wake-up of 2 partitions re-ran %v pops per group, want 2 of each", perGroup)
		}
	})

	synctest.Test(t, func(t *testing.T) {
		b := startBroker(t, p, nil)
		b.gate.hold(true, false)
		parkAll(b)
		b.Wake(persistence.QueueName{Name: "wq"}, nil)
		synctest.Wait()
		var keys []string
		for _, h := range b.gate.takePops() {
			keys = append(keys, h.req.Group+"/"+h.req.Partition)
		}
		slices.Sort(keys)
		if want := []string{"g/", "g/p1", "g/p3", "h/"}; !slices.Equal(keys, want) {
			t.Fatalf("a wake-up naming no partition re-ran pops of %v, want one of each key %v", keys, want)
		}
	})
}

// A parked pop that finds nothing re-checks on the backoff schedule (Initial for Threshold
// checks, then growing up to Max) and is answered TimedOut at its deadline.
func TestParkedPopBacksOffAndTimesOutAtItsDeadline(t *testing.T) {
	p := newPG(t)
	synctest.Test(t, func(t *testing.T) {
		b := startBroker(t, p, func(d *Deps) {
			d.Wait = WaitOptions{Initial: 100 * time.Millisecond, Threshold: 3, Multiplier: 2, Max: time.Second}
		})
		start := time.Now()
		deadline := start.Add(3500 * time.Millisecond)
		reply := park(b.System, popOf("backoff", "g"), deadline)

		advance(time.Until(deadline) - time.Nanosecond)
		if r, ok := received(reply); ok {
			t.Fatalf("parked pop answered %+v before its deadline", r)
		}
		var at []time.Duration
		for _, t := range b.gate.popTimes() {
			at = append(at, t.Sub(start))
		}
		// Checks 1..3 wait Initial; check n > 3 waits Initial*n*Multiplier, at most Max.
		want := []time.Duration{100, 200, 300, 1100, 2100, 3100}
		for i := range want {
			want[i] *= time.Millisecond
		}
		if !slices.Equal(at, want) {
			t.Fatalf("re-checks at %v, want %v", at, want)
		}

		advance(time.Nanosecond)
		r, ok := received(reply)
		if !ok || !r.TimedOut || r.Err != nil || len(r.Result.Messages) != 0 {
			t.Fatalf("at its deadline the parked pop answered %+v (%v), want TimedOut", r, ok)
		}
	})
}

// A long-poll that would park past MaxParkedPerQueue or MaxParked is answered TimedOut at once.
func TestParkingCapsAnswerAtOnce(t *testing.T) {
	p := newPG(t)
	synctest.Test(t, func(t *testing.T) {
		b := startBroker(t, p, func(d *Deps) {
			d.MaxParkedPerQueue, d.MaxParked = 2, 3
		})
		deadline := time.Now().Add(time.Hour)
		parked := []chan PopReply{
			park(b.System, popOf("q1", "g"), deadline),
			park(b.System, popOf("q1", "g"), deadline),
		}
		overQueue := park(b.System, popOf("q1", "g"), deadline)
		parked = append(parked, park(b.System, popOf("q2", "g"), deadline))
		synctest.Wait() // q2's actor parks before q3's tries: the actors run side by side
		overBroker := park(b.System, popOf("q3", "g"), deadline)
		synctest.Wait() // the clock stands still: "at once"

		for name, ch := range map[string]chan PopReply{"over MaxParkedPerQueue": overQueue, "over MaxParked": overBroker} {
			if r, ok := received(ch); !ok || !r.TimedOut || r.Err != nil {
				t.Errorf("a pop %s answered %+v (%v), want TimedOut at once", name, r, ok)
			}
		}
		for i, ch := range parked {
			if r, ok := received(ch); ok {
				t.Errorf("pop %d within the caps answered %+v, want it parked", i, r)
			}
		}
		if v, _ := b.gauge("queen_pop_parked"); v != 3 {
			t.Errorf("queen_pop_parked = %v, want 3", v)
		}
		if v, _ := b.gauge("queen_pop_parked_refused_total"); v != 2 {
			t.Errorf("queen_pop_parked_refused_total = %v, want 2", v)
		}
	})
}

// The per-queue parked gauge appears only once the queue is known to exist in PostgreSQL: found
// by the probe of a parked pop, or shown by a push that committed to it.
func TestParkedGaugeOnlyForQueuesThatExist(t *testing.T) {
	p := newPG(t)
	synctest.Test(t, func(t *testing.T) {
		b := startBroker(t, p, nil)
		const probed = `queen_queue_parked_consumers{queue="later"}`
		park(b.System, popOf("later", "g"), time.Now().Add(time.Hour))
		synctest.Wait()
		if v, _ := b.gauge("queen_pop_parked"); v != 1 {
			t.Fatalf("queen_pop_parked = %v, want 1", v)
		}
		if v, ok := b.gauge(probed); ok {
			t.Fatalf("%s = %v exported for a queue PostgreSQL does not have", probed, v)
		}

		// Another broker creates the queue and tells this one: the next park probes again.
		err := p.do(func(ctx context.Context, s *persistence.Store) error {
			_, err := s.Configure(ctx, persistence.ConfigureRequest{Queue: persistence.QueueName{Name: "later"}})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		b.Wake(persistence.QueueName{Name: "later"}, nil)
		synctest.Wait()
		if v, ok := b.gauge(probed); !ok || v != 1 {
			t.Fatalf("%s = %v (%v) once the queue exists, want 1", probed, v, ok)
		}

		// A push that commits shows the queue exists, without a probe.
		const pushed = `queen_queue_parked_consumers{queue="pushed"}`
		elsewhere := popOf("pushed", "g")
		elsewhere.Partition = "elsewhere" // not woken by the push to p1: it stays parked
		park(b.System, elsewhere, time.Now().Add(time.Hour))
		synctest.Wait()
		if v, ok := b.gauge(pushed); ok {
			t.Fatalf("%s = %v exported before the queue exists", pushed, v)
		}
		probes := b.gate.probeCount()
		push := pushOf("pushed", "p1")
		b.Push(push)
		synctest.Wait()
		if r, ok := received(push.Reply); !ok || r.Err != nil || len(r.Results) != 1 {
			t.Fatalf("push answered %+v (%v)", r, ok)
		}
		if v, ok := b.gauge(pushed); !ok || v != 1 {
			t.Fatalf("%s = %v (%v) after a push committed to the queue, want 1", pushed, v, ok)
		}
		if n := b.gate.probeCount(); n != probes {
			t.Fatalf("%d probes after the push, want none", n-probes)
		}
	})
}

// A pop that brings messages lets a parked pop of its key re-check at once, even while other
// pops of the key are still running: otherwise a busy key's parked pops would wait out their
// deadline while the fresh pops beside them are served.
func TestDeliveryReRunsAParkedPopWhileOthersRun(t *testing.T) {
	p := newPG(t)
	p.storeAsAnotherBroker(t, pushOf("dq", "p1", "p2", "p3"))
	synctest.Test(t, func(t *testing.T) {
		b := startBroker(t, p, nil)
		b.gate.hold(true, false)
		parked := park(b.System, popOf("dq", "g"), time.Now().Add(time.Hour))
		fresh := func() chan PopReply {
			reply := make(chan PopReply, 1)
			b.Pop(&PopRequest{Pop: popOf("dq", "g"), Wait: true, Deadline: time.Now().Add(time.Hour), Reply: reply})
			return reply
		}
		first, second := fresh(), fresh()
		synctest.Wait()
		running := b.gate.takePops()
		if len(running) != 2 {
			t.Fatalf("%d database pops for two fresh pops and a parked one, want 2", len(running))
		}
		close(running[0].release)
		synctest.Wait()
		r, ok := received(first)
		if !ok {
			r, ok = received(second)
		}
		if !ok || len(r.Result.Messages) != 1 {
			t.Fatalf("the released pop answered %+v (%v), want one message", r, ok)
		}
		if rerun := b.gate.takePops(); len(rerun) != 1 {
			t.Fatalf("%d database pops after a delivery while another pop of the key runs, want the parked pop's re-check", len(rerun))
		} else {
			close(rerun[0].release)
		}
		synctest.Wait()
		if r, ok := received(parked); !ok || len(r.Result.Messages) != 1 {
			t.Fatalf("the parked pop answered %+v (%v), want one message", r, ok)
		}
	})
}

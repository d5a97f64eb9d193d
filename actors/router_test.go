package actors

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"queen/persistence"
)

// An actor with nothing to do asks to stop IdleTimeout after its last message, and the router
// stops it; an actor with a parked pop asks only once the pop is answered. A request after the
// stop is served by a new actor.
func TestIdleActorIsPassivated(t *testing.T) {
	p := newPG(t)
	synctest.Test(t, func(t *testing.T) {
		b, h := startHeld(t, p)
		idle := b.deps.IdleTimeout
		answerNow(t, b, "idle")
		busy := park(b.System, popOf("busy", "g"), time.Now().Add(idle+idle/2))

		advance(idle - time.Nanosecond)
		if asks := h.takeAsks(); len(asks) != 0 {
			t.Fatalf("asked to stop before IdleTimeout: %+v", asks)
		}
		advance(time.Nanosecond)
		asks := h.takeAsks()
		if len(asks) != 1 || *asks[0] != (passivate{queue: persistence.QueueName{Name: "idle"}, received: 1}) {
			t.Fatalf("at IdleTimeout the actors asked %+v, want only the idle one, having received 1", asks)
		}
		h.release(b, asks[0])
		synctest.Wait()
		if n := h.stoppedCount(); n != 1 {
			t.Fatalf("the router stopped %d actors, want the idle one", n)
		}

		advance(idle / 2) // the busy actor's pop reaches its deadline
		if r, ok := received(busy); !ok || !r.TimedOut {
			t.Fatalf("parked pop answered %+v (%v) at its deadline, want TimedOut", r, ok)
		}
		advance(idle)
		asks = h.takeAsks()
		if len(asks) != 1 || asks[0].queue.Name != "busy" {
			t.Fatalf("IdleTimeout after its pop was answered the actors asked %+v, want the busy one", asks)
		}
		h.release(b, asks[0])
		synctest.Wait()
		if n := h.stoppedCount(); n != 2 {
			t.Fatalf("the router stopped %d actors, want both", n)
		}

		answerNow(t, b, "idle")
	})
}

// A push the router forwards after the actor asked to stop, but before the router reads the
// request, keeps the actor: stopping it would drop the push's answer from PostgreSQL.
func TestRequestRacingPassivationIsAnswered(t *testing.T) {
	p := newPG(t)
	synctest.Test(t, func(t *testing.T) {
		b, h := startHeld(t, p)
		idle := b.deps.IdleTimeout
		b.gate.hold(false, true)
		answerNow(t, b, "race")
		advance(idle)
		asks := h.takeAsks()
		if len(asks) != 1 {
			t.Fatalf("the idle actor asked %+v, want one request to stop", asks)
		}

		push := pushOf("race", "p1")
		b.Push(push)
		synctest.Wait() // the actor took the push: it waits on PostgreSQL
		h.release(b, asks[0])
		synctest.Wait()
		if n := h.stoppedCount(); n != 0 {
			t.Error("the router stopped an actor it had forwarded a push the actor had not seen")
		}
		b.gate.releasePushes()
		synctest.Wait()
		r, ok := received(push.Reply)
		if !ok || r.Err != nil || r.Buffered || len(r.Results) != 1 || r.Results[0].Status != persistence.StatusQueued {
			t.Fatalf("the push that raced the passivation answered %+v (%v), want it stored", r, ok)
		}

		// Once idle again, the actor asks again and is stopped.
		advance(idle)
		asks = h.takeAsks()
		if len(asks) != 1 || *asks[0] != (passivate{queue: persistence.QueueName{Name: "race"}, received: 2}) {
			t.Fatalf("idle again, the actor asked %+v, want one request having received 2", asks)
		}
		h.release(b, asks[0])
		synctest.Wait()
		if n := h.stoppedCount(); n != 1 {
			t.Fatalf("the router stopped %d actors, want the idle one", n)
		}
	})
}

// answerNow sends queue's actor a pop it answers at once, without the database: one its
// caller has found empty and that may not wait.
func answerNow(t *testing.T, b *broker, queue string) {
	t.Helper()
	reply := make(chan PopReply, 1)
	b.Pop(&PopRequest{Pop: popOf(queue, "g"), Checked: true, Reply: reply})
	synctest.Wait()
	if r, ok := received(reply); !ok || !r.TimedOut {
		t.Fatalf("pop on %s answered %+v (%v), want TimedOut at once", queue, r, ok)
	}
}

// heldRouter watches the router: it holds the queue actors' requests to stop until the test
// releases them, and counts the actors the router stopped.
type heldRouter struct {
	mu      sync.Mutex
	holding bool
	asks    []*passivate
	stopped int
}

// released is a held request to stop, handed on to the router.
type released struct{ *passivate }

// startHeld starts a broker whose router is watched by a heldRouter.
func startHeld(t *testing.T, p *pg) (*broker, *heldRouter) {
	h := &heldRouter{holding: true}
	b := startWith(t, p, nil, func(deps *Deps) *System {
		sys := NewActorSystem(deps.Log)
		wide := newBrokerWide(deps.Metrics)
		pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
			return &router{deps: deps, wide: wide, children: map[persistence.QueueName]*child{}}
		}, actor.WithReceiverMiddleware(h.middleware)))
		return &System{sys: sys, router: pid}
	})
	// Before the broker's cleanup, which lets every actor stop.
	t.Cleanup(func() {
		h.mu.Lock()
		h.holding = false
		h.mu.Unlock()
	})
	return b, h
}

func (h *heldRouter) middleware(next actor.ReceiverFunc) actor.ReceiverFunc {
	return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
		h.mu.Lock()
		switch m := env.Message.(type) {
		case *passivate:
			if h.holding {
				h.asks = append(h.asks, m)
				h.mu.Unlock()
				return
			}
		case released:
			env = &actor.MessageEnvelope{Header: env.Header, Message: m.passivate, Sender: env.Sender}
		case *actor.Terminated:
			h.stopped++
		}
		h.mu.Unlock()
		next(c, env)
	}
}

func (h *heldRouter) release(b *broker, m *passivate) { b.sys.Root.Send(b.router, released{m}) }

func (h *heldRouter) takeAsks() []*passivate {
	h.mu.Lock()
	defer h.mu.Unlock()
	asks := h.asks
	h.asks = nil
	return asks
}

func (h *heldRouter) stoppedCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stopped
}

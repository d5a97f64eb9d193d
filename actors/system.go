package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"queen/persistence"
)

// System is the broker's actor system: the router and its queue actors.
type System struct {
	sys    *actor.ActorSystem
	router *actor.PID
	wide   *brokerWide
}

// Start creates the actor system.
func Start(deps *Deps) *System {
	log := deps.Log.With("subsystem", "actors")
	sys := NewActorSystem(log)
	wide := newBrokerWide(deps.Metrics)
	pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &router{deps: deps, wide: wide, children: map[persistence.QueueName]*child{}}
	}))
	return &System{sys: sys, router: pid, wide: wide}
}

// Parked is the number of long-polls parked on this broker (the rates log line).
func (s *System) Parked() int64 { return s.wide.parked.Load() }

// ParkedByQueue is the number of long-polls parked on each queue that has some, whether the
// queue exists or not (the per-minute statistics).
func (s *System) ParkedByQueue() map[persistence.QueueName]int {
	out := map[persistence.QueueName]int{}
	s.wide.byQueue.Range(func(k, v any) bool {
		out[k.(persistence.QueueName)] = v.(int)
		return true
	})
	return out
}

// Push hands a push of one queue to its actor; the answer arrives on req.Reply.
func (s *System) Push(req *PushRequest) { s.sys.Root.Send(s.router, req) }

// Pop hands a pop to its queue's actor; the answer arrives on req.Reply.
func (s *System) Pop(req *PopRequest) { s.sys.Root.Send(s.router, req) }

// Wake re-runs parked pops of a queue (no-op when it has none).
func (s *System) Wake(queue persistence.QueueName, partitions []string) {
	s.sys.Root.Send(s.router, &Wake{Queue: queue, Partitions: partitions})
}

// Drain answers every parked pop and stops parking new ones: the first step of shutdown, so
// the HTTP server can finish its requests.
func (s *System) Drain() { s.sys.Root.Send(s.router, drain{}) }

// PausePops answers every parked pop at once; call it after turning pop maintenance on.
func (s *System) PausePops() { s.sys.Root.Send(s.router, pausePops{}) }

// Stop stops every actor.
func (s *System) Stop() { s.sys.Shutdown() }

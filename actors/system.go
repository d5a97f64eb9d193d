package actors

import (
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
)

// System is the broker's actor system: the router and its queue actors.
type System struct {
	sys    *actor.ActorSystem
	router *actor.PID
}

// Start creates the actor system.
func Start(deps *Deps) *System {
	log := deps.Log.With("subsystem", "actors")
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		// The actor library logs every start at info; only its warnings interest an operator.
		return slog.New(levelFloor{log.Handler(), slog.LevelWarn})
	}))
	pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &router{deps: deps, children: map[string]*child{}}
	}))
	return &System{sys: sys, router: pid}
}

// Push hands a push of one queue to its actor; the answer arrives on req.Reply.
func (s *System) Push(req *PushRequest) { s.sys.Root.Send(s.router, req) }

// Pop hands a pop to its queue's actor; the answer arrives on req.Reply.
func (s *System) Pop(req *PopRequest) { s.sys.Root.Send(s.router, req) }

// Wake re-runs parked pops of a queue (no-op when it has none).
func (s *System) Wake(queue string, partitions []string) {
	s.sys.Root.Send(s.router, &Wake{Queue: queue, Partitions: partitions})
}

// Drain answers every parked pop and stops parking new ones: the first step of shutdown, so
// the HTTP server can finish its requests.
func (s *System) Drain() { s.sys.Root.Send(s.router, drain{}) }

// Stop stops every actor.
func (s *System) Stop() { s.sys.Shutdown() }

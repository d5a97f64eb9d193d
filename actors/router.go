package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"queen/persistence"
)

// router spawns one queue actor per queue on first use and passivates idle ones.
//
// Passivation handshake: an idle queue actor reports how many requests it has received; the
// router stops it (with Poison, so anything already in its mailbox is still served) only if that
// equals the number it forwarded. Otherwise a request is on its way and the actor stays.
type router struct {
	deps     *Deps
	wide     *brokerWide
	children map[persistence.QueueName]*child
	draining bool
}

type child struct {
	pid       *actor.PID
	forwarded int
}

func (r *router) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *PushRequest:
		r.forward(ctx, m.Queue, m)
	case *PopRequest:
		if r.draining {
			m.Wait = false
		}
		r.forward(ctx, m.Pop.Queue, m)
	case *Wake:
		if c := r.children[m.Queue]; c != nil {
			c.forwarded++
			ctx.Send(c.pid, m)
		}
	case *passivate:
		if c := r.children[m.queue]; c != nil && c.forwarded == m.received {
			delete(r.children, m.queue)
			ctx.Poison(c.pid)
		}
	case drain:
		r.draining = true
		for _, c := range r.children {
			ctx.Send(c.pid, m)
		}
	case pausePops:
		for _, c := range r.children {
			ctx.Send(c.pid, m)
		}
	}
}

func (r *router) forward(ctx actor.Context, queue persistence.QueueName, msg any) {
	c := r.children[queue]
	if c == nil {
		name, wide := queue, r.wide
		c = &child{pid: ctx.Spawn(actor.PropsFromProducer(func() actor.Actor {
			return &queueActor{name: name, deps: r.deps, wide: wide}
		}))}
		r.children[queue] = c
	}
	c.forwarded++
	ctx.Send(c.pid, msg)
}

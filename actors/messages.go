// Package actors owns the per-queue state that must not race: one QueueActor per queue holds its
// parked long-poll pops, submits its pushes and pops to persistence, and wakes its waiters when
// a push commits. A Router actor spawns queue actors on demand and passivates idle ones.
//
// Actors never block on I/O: database work runs in the persistence batchers or in a goroutine,
// and its result comes back to the actor as a message.
package actors

import (
	"time"

	"queen/persistence"
)

// PushRequest stores Items (all of one queue) and answers on Reply.
type PushRequest struct {
	Queue persistence.QueueName
	Items []persistence.PushItem
	Reply chan PushReply // buffered, capacity 1
}

// PushReply is the answer to a PushRequest: stored (Results), or written to the disk spool
// (Buffered), or neither (Err).
type PushReply struct {
	Results  []persistence.PushResult
	Buffered bool
	Err      error
}

// PopRequest pops for one consumer; with Wait it parks until messages arrive or Deadline.
type PopRequest struct {
	Pop      persistence.PopRequest
	Wait     bool
	Deadline time.Time
	Reply    chan PopReply // buffered, capacity 1
	// Gone is closed when the client disconnected: the actor drops the parked pop instead of
	// leasing messages nobody will receive.
	Gone <-chan struct{}
	// Checked says the caller has just found nothing to pop: the actor parks the pop without a
	// first database pop of its own, or answers it empty at once when it may not wait.
	Checked bool
	// OneOf ties this pop to the same client's pops on other queues (a namespace pop); it is
	// only honoured with Checked.
	OneOf *OneOf
}

// PopReply is the answer to a PopRequest. TimedOut marks a long-poll that reached its deadline
// (or was released by shutdown) with nothing to deliver.
type PopReply struct {
	Queue    persistence.QueueName // the queue whose actor answered: a namespace pop waits on several
	Result   persistence.PopResult
	TimedOut bool
	Paused   bool // pop maintenance is on
	Err      error
}

// Wake tells a queue actor that messages arrived in Partitions (all partitions when empty),
// pushed through this broker's transaction route, another broker, or an operator.
type Wake struct {
	Queue      persistence.QueueName
	Partitions []string
}

// internal messages
type (
	pushDone struct {
		req     *PushRequest
		results []persistence.PushResult
		err     error
	}
	// pushTooSlow fires when a push has waited SpoolAfter on PostgreSQL.
	pushTooSlow struct{ req *PushRequest }
	spoolDone   struct {
		req *PushRequest
		err error
	}
	pausePops struct{}
	popDone   struct {
		w      *waiter
		result persistence.PopResult
		err    error
	}
	// ringSearched says how far round the ring a wildcard pop still running has searched.
	ringSearched struct {
		w   *waiter
		pos persistence.RingPosition
	}
	tick struct{}
	// queueProbed says whether the queue exists in PostgreSQL.
	queueProbed bool
	poke        struct{} // a OneOf another actor held is free again
	drain       struct{}
	passivate   struct {
		queue    persistence.QueueName
		received int
	}
)

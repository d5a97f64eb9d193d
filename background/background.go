// Package background runs the loops of a service (a refresh, a drain, a cleanup job, a LISTEN
// connection) so that they stop one way: cancelled, and waited for, before what they use is
// closed.
package background

import (
	"context"
	"sync"
	"time"
)

// Group is a set of loops that stop together.
type Group struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	done   chan struct{}
}

// NewGroup returns a group with no loop yet.
func NewGroup() *Group {
	ctx, cancel := context.WithCancel(context.Background())
	return &Group{ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// Go runs fn in a goroutine of the group; fn must return once its context ends.
func (g *Group) Go(fn func(ctx context.Context)) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		fn(g.ctx)
	}()
}

// Every runs fn every interval (never on a timer when interval is 0 or less) and at once on each
// kick (kick may be nil), one run at a time, until the group stops.
func (g *Group) Every(interval time.Duration, kick <-chan struct{}, fn func(ctx context.Context)) {
	g.Go(func(ctx context.Context) {
		var tick <-chan time.Time
		if interval > 0 {
			t := time.NewTicker(interval)
			defer t.Stop()
			tick = t.C
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick:
			case <-kick:
			}
			fn(ctx)
		}
	})
}

// Stop cancels the runs in progress and waits for every loop to end. It may be called more
// than once.
func (g *Group) Stop() {
	g.cancel()
	g.wg.Wait()
	g.once.Do(func() { close(g.done) })
}

// Done is closed once Stop has seen every loop end.
func (g *Group) Done() <-chan struct{} { return g.done }

package server

import (
	"context"
	"time"
)

// ticking is a background loop of a broker service: fn runs every interval, and at once on
// each kick, one run at a time, until stop.
type ticking struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startTicking starts the loop; kick may be nil.
func startTicking(every time.Duration, kick <-chan struct{}, fn func(ctx context.Context)) *ticking {
	ctx, cancel := context.WithCancel(context.Background())
	t := &ticking{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			case <-kick:
			}
			fn(ctx)
		}
	}()
	return t
}

// stop cancels a run in progress and waits for the loop to end.
func (t *ticking) stop() {
	t.cancel()
	<-t.done
}

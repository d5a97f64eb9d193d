package background

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// A kick runs the loop at once; Stop cancels the run in progress and returns only once every
// loop has ended.
func TestEveryRunsOnKickAndStopWaits(t *testing.T) {
	g := NewGroup()
	kick := make(chan struct{})
	ran := make(chan struct{})
	var inRun, ended atomic.Bool
	g.Every(time.Hour, kick, func(ctx context.Context) {
		inRun.Store(true)
		ran <- struct{}{}
		<-ctx.Done() // a run that lasts until the group stops
		ended.Store(true)
	})
	kick <- struct{}{}
	<-ran
	g.Go(func(ctx context.Context) { <-ctx.Done() })
	g.Stop()
	if !inRun.Load() || !ended.Load() {
		t.Fatalf("Stop returned with a run not ended: ran %v, ended %v", inRun.Load(), ended.Load())
	}
	select {
	case <-g.Done():
	default:
		t.Fatal("Done is open after Stop")
	}
	g.Stop() // a second Stop is harmless
}

// An interval of 0 makes no ticker (time.NewTicker would panic): only kicks run the loop.
func TestEveryWithoutIntervalRunsOnlyOnKick(t *testing.T) {
	g := NewGroup()
	defer g.Stop()
	kick := make(chan struct{})
	runs := make(chan int, 3)
	n := 0
	g.Every(0, kick, func(context.Context) { n++; runs <- n })
	select {
	case r := <-runs:
		t.Fatalf("run %d without a kick", r)
	default:
	}
	kick <- struct{}{}
	if r := <-runs; r != 1 {
		t.Fatalf("first kick gave run %d", r)
	}
}

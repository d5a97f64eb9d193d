package fusion

import (
	"context"
	"sync"
)

// Batcher fuses jobs submitted from many goroutines into few batches. It fires a batch as soon
// as one of its in-flight slots is free, with everything queued at that moment (up to max
// units): an idle broker answers a lone request at once, and a busy one commits large batches
// because jobs pile up while every slot waits on PostgreSQL. Commits, not statements, are what
// a small PostgreSQL runs out of first.
type Batcher[J any] struct {
	in    chan J
	slots chan struct{}
	max   int
	size  func(J) int
	run   func(context.Context, []J)
	wg    sync.WaitGroup
	done  chan struct{}
}

// NewBatcher starts a batcher that keeps up to inFlight batches of at most max units (as
// counted by size) running through run.
func NewBatcher[J any](max, inFlight int, size func(J) int, run func(context.Context, []J)) *Batcher[J] {
	b := &Batcher[J]{
		in:    make(chan J, 4096),
		slots: make(chan struct{}, inFlight),
		max:   max,
		size:  size,
		run:   run,
		done:  make(chan struct{}),
	}
	go b.loop()
	return b
}

// Submit queues a job. It blocks only when 4096 jobs already wait, which pushes back on callers.
func (b *Batcher[J]) Submit(j J) { b.in <- j }

// TrySubmit queues a job unless 4096 already wait; it never blocks.
func (b *Batcher[J]) TrySubmit(j J) bool {
	select {
	case b.in <- j:
		return true
	default:
		return false
	}
}

// full reports whether the queue has no room left (a hint: others may be submitting).
func (b *Batcher[J]) full() bool { return len(b.in) == cap(b.in) }

// Close stops accepting jobs, runs what is queued and waits for every batch to finish.
func (b *Batcher[J]) Close() {
	close(b.in)
	<-b.done
}

func (b *Batcher[J]) loop() {
	defer close(b.done)
	var carry *J
	for {
		var first J
		if carry != nil {
			first, carry = *carry, nil
		} else {
			j, ok := <-b.in
			if !ok {
				break
			}
			first = j
		}
		b.slots <- struct{}{}
		batch := []J{first}
		units := b.size(first)
	gather:
		for units < b.max {
			select {
			case j, ok := <-b.in:
				if !ok {
					break gather
				}
				if units+b.size(j) > b.max {
					carry = &j
					break gather
				}
				batch = append(batch, j)
				units += b.size(j)
			default:
				break gather
			}
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			// Shutdown waits for in-flight batches instead of cancelling them: a job that
			// reached PostgreSQL must get its real answer.
			b.run(context.Background(), batch)
			<-b.slots
		}()
	}
	b.wg.Wait()
}

package spool

import (
	"sync"
	"time"
)

// paceSlack is how many records may be appended during a drain before pacing applies: a drain
// that is about to end does not slow the pushes that arrive meanwhile.
const paceSlack = 1000

// pacer keeps a drain ahead of the appends that arrive while it runs (Options.PaceWait): from
// the moment a drain finds its consumer ready until the spool is empty, an Append waits until
// the records appended since then stay within half of those replayed (plus paceSlack), so the
// backlog shrinks by at least half the drain's rate. Once the backlog is within paceSlack the
// drain closes the spool to appends for its last round: an append held then is released with
// ErrDrained when that round empties the spool, so that it goes straight to the consumer and
// the spool hands over under a steady load instead of taking every push for ever. No append
// waits longer than PaceWait: it is slowed, never refused.
type pacer struct {
	wait time.Duration // 0: no pacing

	mu       sync.Mutex
	on       bool
	closing  bool          // the drain's last round: appends wait for its end
	handover bool          // the last drain emptied the spool: appends waiting go elsewhere
	drained  int64         // records the drain replayed since it began
	appended int64         // records appended since the drain began
	progress chan struct{} // closed and replaced at each step of the drain, and when it ends
	waits    int64         // appends that waited, since Open
	waited   time.Duration // their waits, summed
	waiting  int           // appends waiting now
}

func newPacer(wait time.Duration) *pacer {
	return &pacer{wait: wait, progress: make(chan struct{})}
}

// start begins pacing, unless it is on already.
func (p *pacer) start() {
	p.mu.Lock()
	if !p.on && p.wait > 0 {
		p.on, p.closing, p.handover, p.drained, p.appended = true, false, false, 0, 0
	}
	p.mu.Unlock()
}

// close holds every append until the drain's next round ends.
func (p *pacer) close() {
	p.mu.Lock()
	p.closing = p.on
	p.mu.Unlock()
}

// stop ends pacing and releases the appends waiting: with ErrDrained when the drain emptied
// the spool (emptied), to append when it stopped for another reason.
func (p *pacer) stop(emptied bool) {
	p.mu.Lock()
	if p.on {
		p.handover = emptied && p.closing
	}
	p.on, p.closing = false, false
	p.signalLocked()
	p.mu.Unlock()
}

// replayed counts n records the drain delivered and releases the appends it makes room for.
func (p *pacer) replayed(n int) {
	p.mu.Lock()
	p.drained += int64(n)
	p.signalLocked()
	p.mu.Unlock()
}

func (p *pacer) signalLocked() {
	close(p.progress)
	p.progress = make(chan struct{})
}

// admit waits, at most p.wait, until n more appended records keep within the pace, and counts
// them. It returns ErrDrained when it waited for a last round that emptied the spool.
func (p *pacer) admit(n int) error {
	var start time.Time
	for {
		p.mu.Lock()
		handover := !start.IsZero() && !p.on && p.handover
		within := !p.closing && p.appended+int64(n) <= p.drained/2+paceSlack
		if !p.on || within || (!start.IsZero() && time.Since(start) >= p.wait) {
			if p.on {
				p.appended += int64(n)
			}
			if !start.IsZero() {
				p.waits++
				p.waited += time.Since(start)
			}
			p.mu.Unlock()
			if handover {
				return ErrDrained
			}
			return nil
		}
		if start.IsZero() {
			start = time.Now()
		}
		progress := p.progress
		p.waiting++
		p.mu.Unlock()
		t := time.NewTimer(p.wait - time.Since(start))
		select {
		case <-progress:
		case <-t.C:
		}
		t.Stop()
		p.mu.Lock()
		p.waiting--
		p.mu.Unlock()
	}
}

// stats returns the appends that waited and their waits, summed.
func (p *pacer) stats() (int64, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waits, p.waited
}

package spool

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"queen/testkit"
)

func records(from, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = record(from + i)
	}
	return out
}

func (p *pacer) waitingNow() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting
}

// While a drain runs, an append waits until the drain has replayed twice what was appended
// since it began (beyond paceSlack); a drain that finds the spool empty ends the pacing, and
// the records all come out in order.
func TestDrainPacesAppends(t *testing.T) {
	s := openWith(t, Options{Dir: t.TempDir(), PaceWait: time.Minute}, nil)
	mustAppend(t, s, records(0, 3000)...)
	step := make(chan struct{}) // one batch of the drain per receive
	var replayed atomic.Int64
	var got [][]byte
	drain := func() {
		t.Helper()
		_, err := s.DrainWhenReady(context.Background(), 100, func(context.Context) error { return nil },
			func(batch [][]byte) (map[int]string, error) {
				<-step
				got = append(got, batch...)
				replayed.Add(int64(len(batch)))
				return nil, nil
			})
		if err != nil {
			t.Error(err)
		}
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		drain()
	}()
	step <- struct{}{} // the drain has begun (100 replayed): pacing is on

	// Within the slack: at once.
	mustAppend(t, s, records(3000, 900)...)
	// Past it: 900 + 600 appended needs 1000 replayed (1500 ≤ 1000/2 + 1000).
	appended := make(chan int64, 1)
	go func() {
		if err := s.Append(records(3900, 600)); err != nil {
			t.Error(err)
		}
		appended <- replayed.Load()
	}()
	testkit.WaitFor(t, time.Minute, "the append to wait for the drain", func() bool { return s.pace.waitingNow() == 1 })
	if r := replayed.Load(); r != 100 {
		t.Fatalf("%d records replayed while the append waits, want 100", r)
	}
	for r := 100; r < 3000; r += 100 {
		step <- struct{}{}
		if r+100 < 1000 && len(appended) > 0 {
			t.Fatalf("the append past the pace returned after %d records replayed, want 1000", r+100)
		}
	}
	<-drained
	if at := <-appended; at < 1000 {
		t.Fatalf("the append past the pace returned after %d records replayed, want at least 1000", at)
	}
	if st := s.Stats(); st.PacedAppends != 1 || st.PacedWait <= 0 {
		t.Errorf("stats: %d paced appends waiting %v, want 1 and some wait", st.PacedAppends, st.PacedWait)
	}
	// What arrived during the drain is drained next; that round finds the spool empty and
	// ends the pacing: an append does not wait now.
	close(step) // the drain runs freely from here
	drain()
	mustAppend(t, s, records(4500, 2000)...)
	if st := s.Stats(); st.PacedAppends != 1 {
		t.Errorf("an append after the drain waited: %d paced appends", st.PacedAppends)
	}
	drain()
	equalRecords(t, got, records(0, 6500))
}

// An append never waits longer than PaceWait: a drain that makes no progress slows pushes, it
// does not stop them.
func TestPacedAppendWaitsAtMostPaceWait(t *testing.T) {
	s := openWith(t, Options{Dir: t.TempDir(), PaceWait: 50 * time.Millisecond}, nil)
	mustAppend(t, s, records(0, 10)...)
	stuck := make(chan struct{})
	inDrain := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.DrainWhenReady(context.Background(), 100, func(context.Context) error { return nil },
			func([][]byte) (map[int]string, error) {
				close(inDrain)
				<-stuck
				return nil, nil
			})
	}()
	<-inDrain
	mustAppend(t, s, records(10, 2000)...) // past the slack, with nothing replayed: it waits out PaceWait
	close(stuck)
	<-done
	if st := s.Stats(); st.PacedAppends != 1 {
		t.Errorf("%d paced appends, want 1", st.PacedAppends)
	}
}

// Under a steady stream of appends the spool still empties: once the backlog is within
// paceSlack the drain holds appends for its last round, and an append held when that round
// empties the spool is released with ErrDrained, having stored nothing.
func TestDrainHandsOverUnderSteadyAppends(t *testing.T) {
	s := openWith(t, Options{Dir: t.TempDir(), PaceWait: time.Minute}, nil)
	mustAppend(t, s, records(0, 500)...)
	step := make(chan struct{})
	entered := make(chan struct{}, 2) // the drain is in a batch
	rounds := make(chan error, 1)
	go func() {
		_, err := s.DrainWhenReady(context.Background(), 1000, func(context.Context) error { return nil },
			func([][]byte) (map[int]string, error) {
				entered <- struct{}{}
				<-step
				return nil, nil
			})
		rounds <- err
	}()
	<-entered // the first round has its batch of 500
	mustAppend(t, s, records(500, 200)...)
	step <- struct{}{}
	// The first round ends; 200 are left, within the slack: the last round starts, and holds
	// appends.
	held := make(chan error, 1)
	<-entered // the last round has its batch of 200
	s.pace.mu.Lock()
	closing := s.pace.closing
	s.pace.mu.Unlock()
	if !closing {
		t.Fatal("the last round does not hold appends")
	}
	go func() { held <- s.Append(records(700, 1)) }()
	testkit.WaitFor(t, time.Minute, "the append to be held", func() bool { return s.pace.waitingNow() == 1 })
	step <- struct{}{} // the last round drains the 200
	if err := <-rounds; err != nil {
		t.Fatal(err)
	}
	if err := <-held; !errors.Is(err, ErrDrained) {
		t.Fatalf("the held append: %v, want ErrDrained", err)
	}
	if st := s.Stats(); st.Records != 0 {
		t.Errorf("%d records pending after the hand-over, want 0", st.Records)
	}
	mustAppend(t, s, records(701, 1)...) // pacing is off: at once
}

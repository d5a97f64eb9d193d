package testkit

import (
	"testing"
	"time"
)

// Eventually re-checks cond on a ticker until it holds or d has passed, and reports whether it
// held. It is for state seen only from outside (a gauge, a port, a status route): d is a
// generous bound on something that must happen, never a measure of how fast it happens.
func Eventually(d time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
	return true
}

// WaitFor is Eventually that fails the test, naming what did not happen.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Eventually(d, cond) {
		t.Fatalf("%s did not happen within %v", what, d)
	}
}

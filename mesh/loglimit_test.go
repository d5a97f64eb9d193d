package mesh

import (
	"testing"
	"time"
)

func TestLogLimiterWritesOneLinePerKindPerInterval(t *testing.T) {
	var l logLimiter
	t0 := time.Now()
	refused := limitKey{msg: "mesh connection refused: handshake"}
	fromPeer := limitKey{msg: refused.msg, peer: true}
	steps := []struct {
		k          limitKey
		at         time.Duration
		ok         bool
		suppressed int
	}{
		{refused, 0, true, 0},
		{refused, time.Millisecond, false, 0},
		{refused, warnInterval / 2, false, 0},
		{fromPeer, warnInterval / 2, true, 0}, // a peer's trouble is not hidden by strangers'
		{limitKey{msg: "mesh accept failed"}, warnInterval / 2, true, 0},
		{refused, warnInterval - time.Millisecond, false, 0},
		{refused, warnInterval, true, 3},
		{refused, warnInterval + time.Second, false, 0},
		{refused, 5 * warnInterval, true, 1},
		{refused, 7 * warnInterval, true, 0},
	}
	for i, s := range steps {
		ok, suppressed := l.allow(s.k, t0.Add(s.at))
		if ok != s.ok || suppressed != s.suppressed {
			t.Fatalf("step %d (%+v): allow = %v, %d; want %v, %d", i, s.k, ok, suppressed, s.ok, s.suppressed)
		}
	}
}

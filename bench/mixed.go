package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// MixedConfig is the steady state: Conns producers pushing Batch×Size messages over Partitions
// while Consumers consumers per group pop PopBatch and ack (or autoAck) on the same, fresh
// queue. Groups 0 is queue mode; N > 0 makes N consumer groups read every message (fan-out
// under load).
type MixedConfig struct {
	Batch      int  `json:"batch"`
	PopBatch   int  `json:"popBatch"`
	Size       int  `json:"size"`
	Partitions int  `json:"partitions"`
	Conns      int  `json:"conns"`
	Consumers  int  `json:"consumers"`
	Groups     int  `json:"groups"`
	AutoAck    bool `json:"autoAck"`
	Rate       int  `json:"rate"` // total push rate in msg/s; 0 pushes as fast as the broker takes it
	// MaxLag holds the producers back while the slowest group is more than this many messages
	// behind (0: never): the rate the whole cycle sustains, rather than the pushes' alone.
	MaxLag   int           `json:"maxLag,omitempty"`
	Duration time.Duration `json:"durationNs"`
	Warmup   time.Duration `json:"warmupNs"`
}

func (c MixedConfig) label() string {
	mode := "+ack"
	if c.AutoAck {
		mode = " autoAck"
	}
	rate := ""
	if c.Rate > 0 {
		rate = fmt.Sprintf(" @%s/s", count(int64(c.Rate)))
	}
	if c.Groups > 0 {
		return fmt.Sprintf("mixed push %d×%dB p%d c%d%s + %dg×%dc pop%d%s", c.Batch, c.Size, c.Partitions, c.Conns, rate, c.Groups, c.Consumers, c.PopBatch, mode)
	}
	return fmt.Sprintf("mixed push %d×%dB p%d c%d%s + pop%d%s c%d", c.Batch, c.Size, c.Partitions, c.Conns, rate, c.PopBatch, mode, c.Consumers)
}

var mixedScenario = scenario{
	name:     "mixed",
	help:     "push and consume at once on a fresh queue; reports the consumer lag; --rate caps the pushes",
	own:      []string{"groups", "autoack", "rate", "pop-batch", "max-lag"},
	defaults: map[string]string{"conns": "8"},
	jobs:     func(o *options) []job { return []job{newJob("mixed", o.mixed(), RunMixed)} },
}

func (o *options) mixed() MixedConfig {
	return MixedConfig{Batch: o.batch, PopBatch: o.popBatchOr(o.batch), MaxLag: o.maxLag, Size: o.size, Partitions: o.partitions, Conns: o.conns, Consumers: o.consumers,
		Groups: o.groups, AutoAck: o.autoAck, Rate: o.rate, Duration: o.duration, Warmup: o.warmup}
}

// RunMixed pushes and consumes at once, samples the consumer lag (messages queued but not yet
// delivered, for the slowest group) every second, then stops the producers and consumers,
// drains the rest (untimed) and checks every group received every message once, in order.
func RunMixed(ctx context.Context, t *Target, cfg MixedConfig) (*Result, error) {
	c, err := t.client()
	if err != nil {
		return nil, err
	}
	queue := freshQueue("mixed")
	parts := partitionNames(cfg.Partitions)
	led := newLedger(cfg.Conns)
	var errs errorCounts
	var groups []*groupLog
	for _, g := range groupNames(cfg.Groups) {
		groups = append(groups, newGroupLog(g, parts, cfg.Size))
	}
	lag := func() int64 {
		pushed := led.expected()
		var lagMax int64
		for _, g := range groups {
			lagMax = max(lagMax, pushed-g.count.Load())
		}
		return lagMax
	}

	w := startWindow(ctx, t, cfg.Warmup, cfg.Duration)
	stopProgress := startProgress(cfg.label(), w, func() string {
		return fmt.Sprintf("pushed %s  lag %s  errors %d", count(led.expected()), count(lag()), errs.total())
	})

	var pushMsgs, pushReqs atomic.Int64
	pushLats := make([]latencies, cfg.Conns)
	var wg sync.WaitGroup
	for i := range cfg.Conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := newProducer(i, c, queue, parts, cfg.Size, led, &errs)
			// With a rate, each producer sends one request every interval: the steady state
			// the consumers must keep up with, instead of a race they cannot win.
			pace := newPacer(cfg.Rate, cfg.Batch*cfg.Conns)
			for n := 0; !w.over(); n++ {
				pace.wait(n)
				for cfg.MaxLag > 0 && lag() > int64(cfg.MaxLag) && !w.over() {
					time.Sleep(2 * time.Millisecond)
				}
				sent := now()
				ok := p.push((i+n)%len(parts), cfg.Batch)
				if done := now(); w.in(done) {
					pushLats[i] = append(pushLats[i], done-sent)
					pushMsgs.Add(int64(ok))
					pushReqs.Add(1)
				}
			}
		}()
	}

	// Lag, once a second over the measured window; the last sample is taken as it closes.
	var samples []int64
	var sampleTimes []float64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-w.closed:
				samples, sampleTimes = append(samples, lag()), append(sampleTimes, (now()-time.Duration(w.from.Load())).Seconds())
				return
			case <-tick.C:
				if at, from := now(), time.Duration(w.from.Load()); at >= from {
					samples, sampleTimes = append(samples, lag()), append(sampleTimes, (at-from).Seconds())
				}
			}
		}
	}()

	st := runConsumers(oneQueue(c, queue), groups, cfg.Consumers, cfg.PopBatch, cfg.AutoAck, 0, w, &errs)
	wg.Wait()
	<-sampled
	stopProgress()

	r := newResult("mixed", cfg.label(), t, cfg)
	w.finish(r)
	r.setRates(pushMsgs.Load(), pushReqs.Load())
	r.Latency = percentiles(pushLats...)
	consumed := 0.0
	if r.Seconds > 0 {
		consumed = float64(st.msgs.Load()) / r.Seconds
	}
	r.ConsumedPerSec = &consumed
	r.LagSamples = samples
	if len(samples) > 0 {
		end := samples[len(samples)-1]
		r.LagEnd = &end
		slope := slope(sampleTimes, samples)
		r.LagSlope = &slope
		// Growing: over the window the lag rose by more than the messages the consumers hold
		// in flight (a batch each) plus 5% of what was pushed, i.e. not just noise.
		rise := slope * r.Seconds
		growing := rise > float64(cfg.PopBatch*cfg.Consumers*len(groups))+0.05*float64(pushMsgs.Load())
		r.LagGrowing = &growing
		trend := "steady"
		if growing {
			trend = "GROWING: the consumers do not keep up"
		}
		r.note("consumed %s msg/s (%s delivered, all groups), pop+ack cycle p50 %.1f / p99 %.1f ms; lag at end %s, slope %+.0f msg/s: %s",
			fmtRate(consumed), count(st.msgs.Load()), percentiles(st.lats...).P50, percentiles(st.lats...).P99, count(end), slope, trend)
	}
	r.note("push p50/p95/p99 in the columns; consumers run at the same time")

	var left int64
	for _, g := range groups {
		before := g.count.Load()
		drain(ctx, cfg.label(), c, queue, g, led.expected(), &errs)
		left += g.count.Load() - before
		r.fail(g.check(led)...)
	}
	if left > 0 {
		r.note("%s messages not consumed by the end were drained with autoAck to verify", count(left))
	}
	if led.expected() == 0 {
		r.fail("no message was pushed")
	}
	r.setErrors(&errs)
	return r.done(), nil
}

// pacer spaces one worker's requests so that all workers together move rate items per second,
// perRound items being one request of each: request n goes at start + n intervals, so a slow
// request is caught up rather than drifting. A rate of 0 never waits.
type pacer struct {
	start    time.Time
	interval time.Duration
}

func newPacer(rate, perRound int) pacer {
	p := pacer{start: time.Now()}
	if rate > 0 {
		p.interval = time.Duration(float64(time.Second) * float64(perRound) / float64(rate))
	}
	return p
}

func (p pacer) wait(n int) {
	if d := time.Until(p.start.Add(time.Duration(n) * p.interval)); p.interval > 0 && d > 0 {
		time.Sleep(d)
	}
}

// slope is the least-squares slope of y over x.
func slope(x []float64, y []int64) float64 {
	n := float64(len(x))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range x {
		yi := float64(y[i])
		sx, sy, sxx, sxy = sx+x[i], sy+yi, sxx+x[i]*x[i], sxy+x[i]*yi
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

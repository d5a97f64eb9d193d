package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// OutageConfig is the outage scenario: Conns producers push Batch×Size messages over Partitions
// for Duration while the bench's PostgreSQL is stopped for most of it (from Duration/10, at
// most 30 s, after the start until as long before the end), so the broker answers from its disk
// spool. Every figure is reported per Every; then the spool's drain after PostgreSQL returns,
// with the producers still pushing until it is done.
type OutageConfig struct {
	Batch      int           `json:"batch"`
	Size       int           `json:"size"`
	Partitions int           `json:"partitions"`
	Conns      int           `json:"conns"`
	Duration   time.Duration `json:"durationNs"`
	Every      time.Duration `json:"everyNs"`
}

func (c OutageConfig) label() string {
	return fmt.Sprintf("outage push %d×%dB p%d c%d, PostgreSQL down", c.Batch, c.Size, c.Partitions, c.Conns)
}

var outageScenario = scenario{
	name: "outage",
	help: "push while PostgreSQL is stopped for most of --duration (disk spool), reported per\n--every; then the spool's drain once it is back",
	own:  []string{"every"},
	// 8 connections, 10 messages per request: producers of small pushes, the spool's case.
	defaults:  map[string]string{"batch": "10", "conns": "8"},
	ownBroker: "outage stops and starts the PostgreSQL behind the broker",
	jobs: func(o *options) []job {
		cfg := OutageConfig{Batch: o.batch, Size: o.size, Partitions: o.partitions, Conns: o.conns, Duration: o.duration, Every: o.every}
		return []job{newJob("outage", cfg, RunOutage)}
	},
}

// OutageInterval is one reporting interval of the outage scenario.
type OutageInterval struct {
	From       float64     `json:"fromSeconds"` // since the start of the pushes
	To         float64     `json:"toSeconds"`
	PGDown     float64     `json:"pgDownSeconds"` // of the interval
	MsgPerSec  float64     `json:"msgPerSec"`     // answered queued or buffered
	Buffered   int64       `json:"buffered"`
	Refused    int64       `json:"refused"` // answered 503 spool_full
	Latency    Percentiles `json:"latencyMs"`
	Segments   int         `json:"segments"` // spool files at the end of the interval
	SpoolBytes int64       `json:"spoolBytes"`
	MaxBytes   int64       `json:"spoolMaxBytes"` // largest seen during the interval
}

// OutageDrain is how the spool emptied once PostgreSQL was back, with the producers pushing.
type OutageDrain struct {
	Records   int64   `json:"records"` // pending when PostgreSQL came back, plus buffered after
	Seconds   float64 `json:"seconds"` // from PostgreSQL accepting connections to the spool empty
	PerSecond float64 `json:"perSecond"`
	// The producers meanwhile: what they pushed per second (answered queued or buffered), and
	// their latency.
	PushPerSecond float64     `json:"pushPerSecond"`
	PushLatency   Percentiles `json:"pushLatencyMs"`
}

// pushSample is one push request: when it completed, how long it took, what it stored.
type pushSample struct {
	at, lat           time.Duration
	stored, buffered  int
	refused           int
	sentWhilePGIsDown bool
}

// spoolSample is one reading of /api/v1/status/buffers.
type spoolSample struct {
	at      time.Duration
	files   int
	bytes   int64
	pending int64
}

// RunOutage pushes while PostgreSQL is stopped, reports per interval, measures the drain once
// it is back, then drains the queue (untimed) to check that every message answered queued or
// buffered came back exactly once, in order, and no message refused for a full spool did.
func RunOutage(ctx context.Context, t *Target, cfg OutageConfig) (*Result, error) {
	if t.PG == nil {
		return nil, fmt.Errorf("%s needs a PostgreSQL the bench can stop: run it without --url", cfg.label())
	}
	c, err := t.client()
	if err != nil {
		return nil, err
	}
	queue := freshQueue("outage")
	parts := partitionNames(cfg.Partitions)
	led := newLedger(cfg.Conns)
	var errs errorCounts
	lead := min(cfg.Duration/10, 30*time.Second)
	var pgDown atomic.Bool
	var downAt, upAt time.Duration // on the clock0 time base, set by the PostgreSQL switch below

	w := startWindow(ctx, t, 0, cfg.Duration)
	start := time.Duration(w.from.Load())
	var refusedAll atomic.Int64
	stopProgress := startProgress(cfg.label(), w, func() string {
		state := "up"
		if pgDown.Load() {
			state = "DOWN"
		}
		return fmt.Sprintf("PostgreSQL %s  stored %s  refused %s  errors %d", state, count(led.expected()), count(refusedAll.Load()), errs.total())
	})

	samples := make([][]pushSample, cfg.Conns)
	var wg sync.WaitGroup
	// The producers go on past the window until the spool has drained: the drain is measured
	// under the load it has to keep up with.
	var stopProducers atomic.Bool
	for i := range cfg.Conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := newProducer(i, c, queue, parts, cfg.Size, led, &errs)
			p.spooled = true
			for n := 0; !stopProducers.Load() && ctx.Err() == nil; n++ {
				down := pgDown.Load()
				sent, buffered, refused := now(), p.buffered, p.refused
				ok := p.push((i+n)%len(parts), cfg.Batch)
				refusedAll.Add(p.refused - refused)
				samples[i] = append(samples[i], pushSample{at: now(), lat: now() - sent, stored: ok,
					buffered: int(p.buffered - buffered), refused: int(p.refused - refused), sentWhilePGIsDown: down})
			}
		}()
	}

	// The spool as the broker reports it, once a second until it has drained.
	var smu sync.Mutex
	var spool []spoolSample
	readSpool := func() (spoolSample, error) { return spoolStatus(c.conn()) }
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
				if s, err := readSpool(); err == nil {
					smu.Lock()
					spool = append(spool, s)
					smu.Unlock()
				}
			}
		}
	}()

	r := newResult("outage", cfg.label(), t, cfg)
	// PostgreSQL: up for lead, down until lead before the end, then up again.
	var pending int64
	if sleepCtx(ctx, lead) {
		if err := t.PG.stop(); err != nil {
			r.fail(err.Error())
		} else {
			downAt = now()
			pgDown.Store(true)
		}
		if sleepCtx(ctx, start+cfg.Duration-lead-now()) {
			// What the spool holds just before PostgreSQL returns: the drain's backlog.
			if s, err := readSpool(); err == nil {
				pending = s.pending
			}
		}
		if err := t.PG.start(context.WithoutCancel(ctx)); err != nil {
			return nil, err // nothing to verify against
		}
		upAt = now()
		pgDown.Store(false)
	}
	// The window (and its CPU figures) ends at Duration; the drain, until the spool is empty
	// with the producers pushing, however long it takes (bounded, so a broker that never
	// drains fails the run instead of hanging it).
	<-w.closed
	drainLimit := max(5*time.Minute, 4*cfg.Duration)
	drained := false
	var left int64 // pending at the last reading
	for deadline := now() + drainLimit; upAt > 0 && now() < deadline && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
		if s, err := readSpool(); err == nil {
			if left = s.pending; left == 0 {
				drained = true
				break
			}
		}
	}
	drainedAt := now()
	stopProducers.Store(true)
	wg.Wait()
	stopProgress()
	w.finish(r)
	close(stopSampling)
	<-sampled

	var all []latencies
	var stored, reqs int64
	for _, ps := range samples {
		var l latencies
		for _, s := range ps {
			if s.at-start < cfg.Duration {
				l = append(l, s.lat)
				stored += int64(s.stored)
			}
		}
		all = append(all, l)
		reqs += int64(len(l))
	}
	r.setRates(stored, reqs)
	r.Latency = percentiles(all...)
	r.Intervals = outageIntervals(cfg, start, downAt, upAt, samples, spool)
	for _, iv := range r.Intervals {
		r.note("%s–%s  PostgreSQL down %5.1f s  %7s msg/s  p99 %7.1f ms  buffered %s  refused %s  spool %d files %s (max %s)",
			clock(iv.From), clock(iv.To), iv.PGDown, fmtRate(iv.MsgPerSec), iv.Latency.P99, count(iv.Buffered), count(iv.Refused),
			iv.Segments, fmtBytes(iv.SpoolBytes), fmtBytes(iv.MaxBytes))
	}
	if upAt > 0 {
		var after, pushed int64
		var lats latencies
		for _, ps := range samples {
			for _, s := range ps {
				if s.at > upAt && s.at <= drainedAt {
					pushed += int64(s.stored)
					lats = append(lats, s.lat)
					if !s.sentWhilePGIsDown {
						after += int64(s.buffered)
					}
				}
			}
		}
		d := &OutageDrain{Records: pending + after, Seconds: (drainedAt - upAt).Seconds(), PushLatency: percentiles(lats)}
		if d.Seconds > 0 {
			d.PerSecond = float64(d.Records) / d.Seconds
			d.PushPerSecond = float64(pushed) / d.Seconds
		}
		r.Drain = d
		r.note("drain: %s records (%s pending when PostgreSQL came back, %s buffered after) in %.1f s after PostgreSQL came back: %s records/s",
			count(d.Records), count(pending), count(after), d.Seconds, fmtRate(d.PerSecond))
		r.note("producers during the drain: %s msg/s answered queued or buffered, p50 %.1f ms, p99 %.1f ms",
			fmtRate(d.PushPerSecond), d.PushLatency.P50, d.PushLatency.P99)
	}
	if !drained {
		r.fail(fmt.Sprintf("the spool did not drain within %v of PostgreSQL coming back: %s records still pending", drainLimit, count(left)))
	}

	g := newGroupLog("", parts, cfg.Size)
	drain(ctx, cfg.label(), c, queue, g, led.expected(), &errs)
	r.fail(g.check(led)...)
	var buffered int64
	for _, iv := range r.Intervals {
		buffered += iv.Buffered
	}
	if buffered == 0 {
		r.fail("no push was answered buffered: PostgreSQL was not seen down")
	}
	r.note("verified by draining %s messages with autoAck pops: every one answered queued (%s) or buffered (%s) exactly once, in order; %s refused for a full spool, none delivered",
		count(g.count.Load()), count(led.expected()-buffered), count(buffered), count(refusedAll.Load()))
	r.setErrors(&errs)
	return r.done(), nil
}

// spoolStatus reads the broker's disk spool from /api/v1/status/buffers.
func spoolStatus(cn *conn) (spoolSample, error) {
	b, err := cn.do("GET", "/api/v1/status/buffers", nil)
	if err != nil {
		return spoolSample{}, err
	}
	var st struct {
		Files   int   `json:"files"`
		Bytes   int64 `json:"bytes"`
		Pending int64 `json:"pending"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return spoolSample{}, fmt.Errorf("cannot decode status/buffers %.200q: %w", b, err)
	}
	return spoolSample{at: now(), files: st.Files, bytes: st.Bytes, pending: st.Pending}, nil
}

// outageIntervals cuts the run into intervals of cfg.Every from start.
func outageIntervals(cfg OutageConfig, start, downAt, upAt time.Duration, samples [][]pushSample, spool []spoolSample) []OutageInterval {
	every := max(cfg.Every, time.Second)
	var out []OutageInterval
	for from := time.Duration(0); from < cfg.Duration; from += every {
		to := min(from+every, cfg.Duration)
		iv := OutageInterval{From: from.Seconds(), To: to.Seconds()}
		if downAt > 0 {
			down, up := downAt-start, upAt-start
			if upAt == 0 {
				up = cfg.Duration
			}
			iv.PGDown = max(0, min(to, up)-max(from, down)).Seconds()
		}
		var lats latencies
		var stored int64
		for _, ps := range samples {
			for _, s := range ps {
				if at := s.at - start; at >= from && at < to {
					lats = append(lats, s.lat)
					stored += int64(s.stored)
					iv.Buffered += int64(s.buffered)
					iv.Refused += int64(s.refused)
				}
			}
		}
		iv.MsgPerSec = float64(stored) / (to - from).Seconds()
		iv.Latency = percentiles(lats)
		for _, s := range spool {
			if at := s.at - start; at >= from && at < to {
				iv.Segments, iv.SpoolBytes = s.files, s.bytes
				iv.MaxBytes = max(iv.MaxBytes, s.bytes)
			}
		}
		out = append(out, iv)
	}
	return out
}

// sleepCtx waits d or until ctx ends; it reports whether the wait ran its course.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// clock formats seconds as m:ss.
func clock(s float64) string {
	return fmt.Sprintf("%d:%02d", int(s)/60, int(s)%60)
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d kiB", n>>10)
}

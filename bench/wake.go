package main

import (
	"context"
	"fmt"
	"time"
)

// WakeConfig is the wake scenario: Samples times, a consumer parks a long-poll pop on an empty
// queue and a producer pushes one message once it is parked; the latency is from the push's
// answer to the pop's. With Mesh set, the pop parks on that broker and the push goes to the
// target: the wake-up has to cross brokers.
type WakeConfig struct {
	Samples int     `json:"samples"`
	Size    int     `json:"size"`
	Mesh    *Target `json:"-"` // the result's notes name it
}

func (c WakeConfig) label() string {
	if c.Mesh != nil {
		return "wake across brokers (parked pop ← push)"
	}
	return "wake (parked pop ← push)"
}

var wakeScenario = scenario{
	name:    "wake",
	help:    "latency from a push's answer to the answer of a parked long-poll pop; --mesh parks\nthe pop on another broker",
	own:     []string{"samples", "mesh"},
	latency: true,
	jobs:    func(o *options) []job { return []job{newJob("wake", o.wake(), RunWake)} },
}

func (o *options) wake() WakeConfig {
	return WakeConfig{Samples: o.samples, Size: o.size, Mesh: o.meshTarget}
}

// wakeWarmup samples open connections and the queue's actor before the measured ones.
const wakeWarmup = 3

// wakeParkLimit is how long a sample waits for the gauge to show its pop parked; wakeFixedWait
// is the wait for a pop to park where the gauge cannot be read. wakePopTimeout, the pop's
// long-poll timeout, outlasts the park wait and a push; it bounds how long a pop left parked
// by a failed push holds on.
const (
	wakeParkLimit  = 5 * time.Second
	wakeFixedWait  = 50 * time.Millisecond
	wakePopTimeout = 2 * wakeParkLimit
)

// popOutcome is a parked pop's answer; the sample's goroutine writes it before closing done.
type popOutcome struct {
	msgs     []popMsg
	err      error
	sent, at time.Duration
	done     chan struct{}
}

func RunWake(ctx context.Context, t *Target, cfg WakeConfig) (*Result, error) {
	pushC, err := t.client()
	if err != nil {
		return nil, err
	}
	popT := t
	if cfg.Mesh != nil {
		popT = cfg.Mesh
	}
	popC, err := popT.client()
	if err != nil {
		return nil, err
	}
	queue := freshQueue("wake")
	parts := partitionNames(1)
	led := newLedger(1)
	var errs errorCounts
	g := newGroupLog("", parts, cfg.Size)
	p := newProducer(0, pushC, queue, parts, cfg.Size, led, &errs)
	popConn, metricsConn := popC.conn(), popC.conn()
	// Create the queue first: a broker keeps parked-pop gauges only for queues that exist, and
	// the samples wait on the gauge.
	if _, err := pushC.conn().do("POST", "/api/v1/configure", []byte(`{"queue":"`+queue+`"}`)); err != nil {
		return nil, fmt.Errorf("cannot create queue %s: %w", queue, err)
	}
	path := popParams{queue: queue, batch: 1, wait: true, timeout: wakePopTimeout, autoAck: true}.path()
	// The gauge is read only where the probe could read the broker's metrics page, and only
	// until it once fails to show a parked pop: past that, every sample would wait the whole
	// limit for it.
	gauge := popT.Native && popT.MetricsErr == nil
	missedAt := -1

	// The window spans the samples; its duration only bounds a broker that never answers.
	w := startWindow(ctx, t, 0, time.Duration(cfg.Samples+wakeWarmup)*(wakeParkLimit+wakePopTimeout))
	var sample int
	stopProgress := startProgress(cfg.label(), w, func() string {
		return fmt.Sprintf("sample %d/%d  errors %d", max(0, sample-wakeWarmup), cfg.Samples, errs.total())
	})
	var fromAnswer, fromSent latencies
	var early int
	pushFailed := -1
	for sample = 0; sample < cfg.Samples+wakeWarmup && ctx.Err() == nil; sample++ {
		out := &popOutcome{done: make(chan struct{})}
		go func() {
			out.sent = now()
			out.msgs, out.err = popConn.pop(path)
			out.at = now()
			close(out.done)
		}()
		if gauge {
			if !waitParked(ctx, metricsConn, queue, out.done) && !out.answered() {
				gauge, missedAt = false, sample
			}
		} else {
			select {
			case <-time.After(wakeFixedWait):
			case <-out.done:
			}
		}
		// A pop that answered before the push (refused, failed, or not parked at all) ends
		// the sample: a push now would be left for the next sample's pop.
		if out.answered() {
			if out.err != nil {
				errs.note(out.err)
			} else {
				g.record(out.msgs, out.sent, out.at)
				errs.items.Add(1)
				errs.firstIs(fmt.Sprintf("sample %d: the long-poll pop answered %d messages before the push", sample, len(out.msgs)))
			}
			continue
		}
		sent := now()
		stored := p.push(0, 1)
		answered := now()
		if stored != 1 {
			// The pop stays parked until its timeout and might yet take the message: the run
			// stops here and leaves it, rather than wait for it and fail every sample alike.
			pushFailed = sample
			break
		}
		select {
		case <-out.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if len(out.msgs) > 0 {
			g.record(out.msgs, out.sent, out.at)
		}
		switch {
		case out.err != nil:
			errs.note(out.err)
			continue
		case len(out.msgs) != 1 || out.msgs[0].Data.S != p.seq-1:
			errs.items.Add(1)
			errs.firstIs(fmt.Sprintf("sample %d: the parked pop answered %d messages, not the one pushed", sample, len(out.msgs)))
			continue
		}
		if sample < wakeWarmup {
			continue
		}
		d := out.at - answered
		if d < 0 {
			early++ // the pop's answer was read before the push's: the wake-up beat the reply
			d = 0
		}
		fromAnswer = append(fromAnswer, d)
		fromSent = append(fromSent, out.at-sent)
	}
	stopProgress()
	r := newResult("wake", cfg.label(), t, cfg)
	w.finish(r)
	r.Latency = percentiles(fromAnswer)
	ps := percentiles(fromSent)
	r.WakeFromPushSent = &ps
	r.note("latency from the push's answer to the parked pop's answer over %d samples; from the push being sent: p50 %.1f / p95 %.1f / p99 %.1f ms",
		len(fromAnswer), ps.P50, ps.P95, ps.P99)
	if early > 0 {
		r.note("%d samples had the pop answered before the push (counted as 0 ms)", early)
	}
	if cfg.Mesh != nil {
		r.note("pops parked on %s, pushes went to %s", cfg.Mesh.URL, t.URL)
	}
	switch {
	case !popT.Native:
		r.note("waited %v for the pop to park: %s does not show this project's parked-pop gauge", wakeFixedWait, popT.URL)
	case popT.MetricsErr != nil:
		r.note("waited %v for the pop to park: %s does not let the bench read the parked-pop gauge (/metrics/prometheus: %v)", wakeFixedWait, popT.URL, popT.MetricsErr)
	case missedAt >= 0:
		r.fail(fmt.Sprintf("sample %d: queen_queue_parked_consumers{queue=%q} never showed the parked pop within %v; the samples after it waited %v instead",
			missedAt, queue, wakeParkLimit, wakeFixedWait))
	}
	if pushFailed >= 0 {
		r.fail(fmt.Sprintf("sample %d: the push was not stored, so the run stopped there", pushFailed))
	}
	if len(fromAnswer) < cfg.Samples {
		r.fail(fmt.Sprintf("only %d of %d samples delivered the pushed message", len(fromAnswer), cfg.Samples))
	}
	r.fail(g.check(led)...)
	r.setErrors(&errs)
	return r.done(), nil
}

// answered reports whether the sample's pop has answered.
func (o *popOutcome) answered() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

// waitParked polls the broker's Prometheus page until the queue's parked-pop gauge reads 1, for
// at most wakeParkLimit; it gives up early when the pop answers (done), which then never parks.
func waitParked(ctx context.Context, cn *conn, queue string, done <-chan struct{}) bool {
	series := `queen_queue_parked_consumers{queue="` + queue + `"`
	deadline := time.Now().Add(wakeParkLimit)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if b, err := cn.do("GET", "/metrics/prometheus", nil); err == nil {
			if n, ok := gaugeValue(b, series); ok && n >= 1 {
				return true
			}
		}
		// Every poll costs the broker a Prometheus page: 2 ms keeps that small while adding
		// at most 2 ms to the sample's setup (not to the measured latency).
		select {
		case <-time.After(2 * time.Millisecond):
		case <-done:
			return false
		}
	}
	return false
}

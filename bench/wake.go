package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
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

// wakeWarmup samples open connections and the queue's actor before the measured ones.
const wakeWarmup = 3

type popOutcome struct {
	msgs []popMsg
	err  error
	at   time.Duration
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
	path := popParams{queue: queue, batch: 1, wait: true, timeout: 30 * time.Second, autoAck: true}.path()

	// The window spans the samples; its duration only bounds a broker that never answers.
	w := startWindow(ctx, t, 0, time.Duration(cfg.Samples+wakeWarmup)*35*time.Second)
	var sample int
	stopProgress := startProgress(cfg.label(), w, func() string {
		return fmt.Sprintf("sample %d/%d  errors %d", max(0, sample-wakeWarmup), cfg.Samples, errs.total())
	})
	var fromAnswer, fromSent latencies
	var early, gaugeMissed int
	for sample = 0; sample < cfg.Samples+wakeWarmup && ctx.Err() == nil; sample++ {
		popped := make(chan popOutcome, 1)
		go func() {
			sent := now()
			msgs, err := popConn.pop(path)
			at := now()
			if len(msgs) > 0 {
				g.record(msgs, sent, at)
			}
			popped <- popOutcome{msgs, err, at}
		}()
		if popT.Native {
			if !waitParked(ctx, metricsConn, queue, 5*time.Second) {
				gaugeMissed++
			}
		} else {
			time.Sleep(50 * time.Millisecond)
		}
		sent := now()
		p.push(0, 1)
		answered := now()
		var out popOutcome
		select {
		case out = <-popped:
		case <-ctx.Done():
			return nil, ctx.Err()
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
	if !popT.Native {
		r.note("waited 50 ms for the pop to park: %s does not show this project's parked-pop gauge", popT.URL)
	}
	if gaugeMissed > 0 {
		r.fail(fmt.Sprintf("%d samples: queen_queue_parked_consumers{queue=%q} never showed the parked pop within 5 s", gaugeMissed, queue))
	}
	if len(fromAnswer) < cfg.Samples {
		r.fail(fmt.Sprintf("only %d of %d samples delivered the pushed message", len(fromAnswer), cfg.Samples))
	}
	r.fail(g.check(led)...)
	r.setErrors(&errs)
	return r.done(), nil
}

// waitParked polls the broker's Prometheus page until the queue's parked-pop gauge reads 1.
func waitParked(ctx context.Context, cn *conn, queue string, limit time.Duration) bool {
	prefix := []byte(`queen_queue_parked_consumers{queue="` + queue + `"} `)
	deadline := time.Now().Add(limit)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		b, err := cn.do("GET", "/metrics/prometheus", nil)
		if err == nil {
			sc := bufio.NewScanner(bytes.NewReader(b))
			for sc.Scan() {
				if v, ok := bytes.CutPrefix(sc.Bytes(), prefix); ok {
					if n, err := strconv.ParseFloat(string(v), 64); err == nil && n >= 1 {
						return true
					}
				}
			}
		}
		// Every poll costs the broker a Prometheus page: 2 ms keeps that small while adding
		// at most 2 ms to the sample's setup (not to the measured latency).
		time.Sleep(2 * time.Millisecond)
	}
	return false
}

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Result is one scenario run against one broker.
type Result struct {
	Scenario string  `json:"scenario"` // ceiling, push, consume, fan-out, mixed, streams, wake, outage, scrape
	Label    string  `json:"label"`    // scenario and its parameters, as in the table
	Target   string  `json:"target"`   // A, or B for the --vs broker
	URL      string  `json:"url,omitempty"`
	Config   any     `json:"config"`
	Seconds  float64 `json:"seconds"` // measured window

	Messages  int64       `json:"messages"` // in the measured window
	MsgPerSec float64     `json:"msgPerSec"`
	ReqPerSec float64     `json:"httpReqPerSec"`
	Latency   Percentiles `json:"latencyMs"` // per request; per pop+ack cycle for consumers
	Errors    Errors      `json:"errors"`

	BrokerCPU   *float64 `json:"brokerCpuCores,omitempty"`
	BrokerRSSMB *float64 `json:"brokerPeakRssMB,omitempty"`
	PGCPU       *float64 `json:"pgCpuCores,omitempty"`
	BenchCPU    *float64 `json:"benchCpuCores,omitempty"` // this load generator
	// BrokerUsPerMsg and PGUsPerMsg are the CPU time each spent per message of MsgPerSec, in
	// microseconds: what a message costs, whatever the rate.
	BrokerUsPerMsg *float64 `json:"brokerCpuUsPerMsg,omitempty"`
	PGUsPerMsg     *float64 `json:"pgCpuUsPerMsg,omitempty"`
	CeilingRatio   *float64 `json:"ceilingRatio,omitempty"`
	// BrokerRSSPerSec is the broker's peak RSS in each second of the measured window, in MB
	// (VmHWM reset every second where the bench may, else the largest of four samples);
	// BrokerRSSMB is the largest of them.
	BrokerRSSPerSec []float64 `json:"brokerRssMBPerSec,omitempty"`

	// mixed
	ConsumedPerSec *float64 `json:"consumedPerSec,omitempty"`
	LagEnd         *int64   `json:"lagEnd,omitempty"`
	LagSlope       *float64 `json:"lagSlopePerSec,omitempty"`
	LagGrowing     *bool    `json:"lagGrowing,omitempty"`
	LagSamples     []int64  `json:"lagSamples,omitempty"` // one per second

	// streams: MsgPerSec is source messages counted by committed cycles; Latency is the runner's
	// round (pop, state read, cycle)
	CyclesPerSec  *float64 `json:"cyclesPerSec,omitempty"`
	CyclesRefused int64    `json:"cyclesRefused,omitempty"` // answered success:false, over the whole run

	// wake: Latency is push answer → pop answer; this is push sent → pop answer
	WakeFromPushSent *Percentiles `json:"wakeFromPushSentMs,omitempty"`

	// outage: the run per interval, and the spool's drain once PostgreSQL was back
	Intervals []OutageInterval `json:"intervals,omitempty"`
	Drain     *OutageDrain     `json:"drain,omitempty"`
	Chaos     []ChaosFault     `json:"chaos,omitempty"`

	// scale: the point and operation; soak: the run per interval, the faults, the tables
	Scale *ScaleFigures `json:"scale,omitempty"`
	Soak  *SoakFigures  `json:"soak,omitempty"`

	Verified bool     `json:"verified"`
	Skipped  bool     `json:"skipped,omitempty"` // the target cannot serve the scenario; the notes say why
	Failures []string `json:"failures,omitempty"`
	Notes    []string `json:"notes,omitempty"`
}

func newResult(scenario, label string, t *Target, cfg any) *Result {
	r := &Result{Scenario: scenario, Label: label, URL: t.URL, Config: cfg}
	// The ceiling alone does not go through the target's HTTP API.
	if !t.Native && scenario != "ceiling" {
		r.note("%s does not answer /health as this project's broker (a front door, or another broker): measured through its HTTP API alone, without the broker's process figures", t.URL)
	}
	return r
}

// latencyOnly reports a scenario measured by latency alone, without a message rate.
func (r *Result) latencyOnly() bool { return r.Scenario == "wake" || r.Scenario == "scrape" }

func (r *Result) fail(msgs ...string) { r.Failures = append(r.Failures, msgs...) }

func (r *Result) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

func (r *Result) setRates(msgs, reqs int64) {
	r.Messages = msgs
	if r.Seconds > 0 {
		r.MsgPerSec = float64(msgs) / r.Seconds
		r.ReqPerSec = float64(reqs) / r.Seconds
	}
}

func (r *Result) setErrors(e *errorCounts) {
	r.Errors = e.snapshot()
	if n := e.total(); n > 0 {
		r.fail(fmt.Sprintf("%d errors (HTTP %d, transport %d, items %d); first: %s",
			n, r.Errors.HTTP, r.Errors.Transport, r.Errors.Items, r.Errors.First))
	}
}

func (r *Result) done() *Result {
	r.Verified = len(r.Failures) == 0
	r.BrokerUsPerMsg, r.PGUsPerMsg = r.perMessage(r.BrokerCPU), r.perMessage(r.PGCPU)
	return r
}

// perMessage is the CPU time of cores (busy cores over the window) per message of MsgPerSec, in
// microseconds; nil when either is unknown.
func (r *Result) perMessage(cores *float64) *float64 {
	if cores == nil || r.MsgPerSec <= 0 || r.latencyOnly() {
		return nil
	}
	us := *cores * 1e6 / r.MsgPerSec
	return &us
}

// freshQueue names a queue no earlier run used.
func freshQueue(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "bench-" + prefix + "-" + hex.EncodeToString(b[:])
}

// count formats a message count compactly.
func count(n int64) string {
	switch {
	case n >= 10_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// window is the measured part of a scenario: it opens warmup after the start (or earlier, when
// the scenario opens it) and lasts duration, unless the scenario closes it early (its consumers
// drained the queue) or the context ends.
type window struct {
	duration time.Duration
	from, to atomic.Int64 // on the clock0 time base; moved when the window opens early
	mon      *monitor
	opened   chan struct{}
	closed   chan struct{}
	openOnce sync.Once
	once     sync.Once
	end      atomic.Int64
}

func startWindow(ctx context.Context, t *Target, warmup, duration time.Duration) *window {
	start := now()
	w := &window{duration: duration, mon: startMonitor(t), opened: make(chan struct{}), closed: make(chan struct{})}
	w.from.Store(int64(start + warmup))
	w.to.Store(int64(start + warmup + duration))
	go func() {
		timer := time.NewTimer(warmup)
		select {
		case <-timer.C:
			w.open(now())
		case <-w.opened:
			timer.Stop()
		case <-w.closed:
			timer.Stop()
			return
		case <-ctx.Done():
			timer.Stop()
			w.close(now())
			return
		}
		timer = time.NewTimer(time.Duration(w.to.Load()) - now())
		select {
		case <-timer.C:
			w.close(now())
		case <-w.closed:
			timer.Stop()
		case <-ctx.Done():
			timer.Stop()
			w.close(now())
		}
	}()
	return w
}

// open starts the measurement at "at" if it has not started yet: consumers of a pre-filled
// queue cut the warmup short, so that it does not eat the messages the measurement needs.
func (w *window) open(at time.Duration) {
	w.openOnce.Do(func() {
		if at < time.Duration(w.from.Load()) {
			w.to.Store(int64(at + w.duration))
			w.from.Store(int64(at))
		}
		w.mon.begin()
		close(w.opened)
	})
}

// over reports whether the workers should stop.
func (w *window) over() bool {
	select {
	case <-w.closed:
		return true
	default:
		return false
	}
}

// in reports whether something that completed at "at" is measured.
func (w *window) in(at time.Duration) bool {
	if at < time.Duration(w.from.Load()) || at >= time.Duration(w.to.Load()) {
		return false
	}
	end := w.end.Load()
	return end == 0 || at <= time.Duration(end)
}

func (w *window) close(at time.Duration) {
	w.once.Do(func() {
		w.end.Store(int64(at))
		w.mon.end()
		close(w.closed)
	})
}

func (w *window) endedEarly() bool {
	return time.Duration(w.end.Load()) < time.Duration(w.to.Load())-10*time.Millisecond
}

// finish closes the window (if the scenario has not) and fills the window's figures of r.
func (w *window) finish(r *Result) {
	w.close(now())
	w.mon.finish(r)
	end := min(time.Duration(w.end.Load()), time.Duration(w.to.Load()))
	r.Seconds = max(0, (end - time.Duration(w.from.Load())).Seconds())
}

// isTerminal reports whether stdout is a terminal, where a live progress line makes sense.
func isTerminal() bool {
	fi, err := os.Stdout.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// startProgress redraws one status line every half second while the scenario runs, on a
// terminal only; the returned function erases it. w is nil for the untimed phases.
func startProgress(label string, w *window, status func() string) (stop func()) {
	if !isTerminal() {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				fmt.Print("\r\033[K")
				return
			case <-tick.C:
				phase := "untimed"
				if w != nil {
					phase = "warmup"
					if at, from := now(), time.Duration(w.from.Load()); at >= from {
						phase = fmt.Sprintf("%4.1fs", (at - from).Seconds())
					}
				}
				fmt.Printf("\r\033[K%s  %s  %s", label, phase, status())
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// Report is the whole run, as written by --json.
type Report struct {
	Started        time.Time    `json:"started"`
	ElapsedSeconds float64      `json:"elapsedSeconds"`
	Command        []string     `json:"command"`
	CPUs           int          `json:"cpus"`
	Targets        []string     `json:"targets"` // A, then B with --vs
	Results        []*Result    `json:"results"`
	Comparisons    []Comparison `json:"comparisons,omitempty"`
	Ratios         []ScaleRatio `json:"ratios,omitempty"`      // scale: the targets of the scale run
	LoadAverage    string       `json:"loadAverage,omitempty"` // scale, soak: /proc/loadavg at the start
	Failed         bool         `json:"failed"`
}

// Comparison is one scenario of a --vs run: A's and B's means over the rounds.
type Comparison struct {
	Label  string  `json:"label"`
	Metric string  `json:"metric"`
	A      float64 `json:"a"`
	B      float64 `json:"b"`
	Ratio  float64 `json:"ratioAB"`
}

func writeJSON(path string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("cannot encode the results: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	return nil
}

func fmtOpt(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

func fmtRate(v float64) string {
	if v == 0 {
		return "-"
	}
	if v >= 10000 {
		return fmt.Sprintf("%.1fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

// printTable writes the summary table and, under it, each scenario's notes and failures.
func printTable(out io.Writer, rep *Report) {
	multi := len(rep.Targets) > 1
	head := []string{"scenario", "msg/s", "req/s", "p50 ms", "p95 ms", "p99 ms", "errors", "broker CPU", "broker µs/msg", "broker RSS", "PG CPU", "PG µs/msg", "bench CPU", "×ceiling", "verified"}
	if multi {
		head = append([]string{"broker"}, head...)
	}
	rows := [][]string{head}
	for _, r := range rep.Results {
		verified := "ok"
		switch {
		case r.Skipped:
			verified = "skipped"
		case !r.Verified:
			verified = "FAILED"
		}
		rss := "-"
		if r.BrokerRSSMB != nil {
			rss = fmt.Sprintf("%.0f MB", *r.BrokerRSSMB)
		}
		row := []string{r.Label, fmtRate(r.MsgPerSec), fmtRate(r.ReqPerSec),
			fmt.Sprintf("%.1f", r.Latency.P50), fmt.Sprintf("%.1f", r.Latency.P95), fmt.Sprintf("%.1f", r.Latency.P99),
			fmt.Sprint(r.Errors.HTTP + r.Errors.Transport + r.Errors.Items),
			fmtOpt(r.BrokerCPU, "%.2f"), fmtOpt(r.BrokerUsPerMsg, "%.1f"), rss, fmtOpt(r.PGCPU, "%.2f"), fmtOpt(r.PGUsPerMsg, "%.1f"),
			fmtOpt(r.BenchCPU, "%.2f"),
			fmtOpt(r.CeilingRatio, "%.3f"), verified}
		if r.latencyOnly() {
			row[1], row[2] = "-", "-"
		}
		if multi {
			row = append([]string{r.Target}, row...)
		}
		rows = append(rows, row)
	}
	widths := make([]int, len(head))
	for _, row := range rows {
		for i, c := range row {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	for ri, row := range rows {
		var b strings.Builder
		for i, c := range row {
			pad := strings.Repeat(" ", widths[i]-len([]rune(c)))
			if i == 0 || (multi && i == 1) {
				b.WriteString(c + pad) // names left-aligned
			} else {
				b.WriteString(pad + c)
			}
			if i < len(row)-1 {
				b.WriteString("  ")
			}
		}
		fmt.Fprintln(out, b.String())
		if ri == 0 {
			fmt.Fprintln(out, strings.Repeat("-", len([]rune(b.String()))))
		}
	}
	for _, r := range rep.Results {
		if len(r.Notes) == 0 && len(r.Failures) == 0 {
			continue
		}
		name := r.Label
		if multi {
			name = r.Target + " " + name
		}
		fmt.Fprintf(out, "\n%s:\n", name)
		for _, n := range r.Notes {
			fmt.Fprintf(out, "  - %s\n", n)
		}
		for _, f := range r.Failures {
			fmt.Fprintf(out, "  ! %s\n", f)
		}
	}
	if len(rep.Comparisons) > 0 {
		fmt.Fprintf(out, "\nA = %s, B = %s (means of the rounds, in the order A B B A …)\n", rep.Targets[0], rep.Targets[1])
		for _, c := range rep.Comparisons {
			fmt.Fprintf(out, "  %-40s %-13s A %10.1f  B %10.1f  A/B %.2f\n", c.Label, c.Metric, c.A, c.B, c.Ratio)
		}
	}
}

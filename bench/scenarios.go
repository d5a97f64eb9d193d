package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// scenario is one thing the bench measures: its name and help, the flags that are its own, the
// defaults it starts from, what it checks of its options and the jobs it runs. Each is declared
// in the file of its measurement; this list is the one place that names them all.
type scenario struct {
	name string
	help string // the usage text after the name: what it measures, and its flags
	// own are the flags only some scenarios take; a scenario refuses another's.
	own []string
	// defaults are flag values it starts from in place of the common ones (a flag given on the
	// command line wins).
	defaults map[string]string
	// ownBroker, when not "", says why it runs only on brokers the bench starts (no --url, no
	// --vs).
	ownBroker string
	check     func(o *options) error // what else it checks of its options; may be nil
	// jobs are its measurements, each run on every target; run replaces them for a scenario
	// that drives its own brokers.
	jobs func(o *options) []job
	run  func(ctx context.Context, o *options, rep *Report)
	// latency: a comparison of two brokers compares p50 latency, not msg/s.
	latency bool
}

func scenarios() []scenario {
	return []scenario{ceilingScenario, pushScenario, consumeScenario, mixedScenario, costScenario, streamsScenario, wakeScenario,
		outageScenario, scrapeScenario, scaleScenario, soakScenario, chaosScenario, allScenario}
}

func findScenario(name string) (scenario, bool) {
	for _, s := range scenarios() {
		if s.name == name {
			return s, true
		}
	}
	return scenario{}, false
}

// ownFlags are the flags some scenario calls its own.
func ownFlags() []string {
	var out []string
	for _, s := range scenarios() {
		for _, f := range s.own {
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// scenarioHelp is the scenarios' part of the usage text.
func scenarioHelp() string {
	var b strings.Builder
	for _, s := range scenarios() {
		lines := strings.Split(s.help, "\n")
		fmt.Fprintf(&b, "  %-9s %s\n", s.name, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(&b, "            %s\n", l)
		}
	}
	return b.String()
}

// job is one measurement with its parameters, runnable against any target.
type job struct {
	name  string
	label string
	run   func(ctx context.Context, t *Target) (*Result, error)
}

// newJob makes the job of one measurement: run with cfg, labelled by cfg.
func newJob[C interface{ label() string }](name string, cfg C, run func(context.Context, *Target, C) (*Result, error)) job {
	return job{name, cfg.label(), func(ctx context.Context, t *Target) (*Result, error) { return run(ctx, t, cfg) }}
}

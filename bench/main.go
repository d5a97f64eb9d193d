// Command bench measures a broker that speaks the Queen HTTP API, and verifies what it measured.
//
//	go run ./bench <scenario> [flags]
//
// The scenarios are listed in scenarios.go, each declared in the file of its measurement.
// Without --url it builds ./cmd/queen and runs it with a private PostgreSQL in a temporary
// directory, which also gives it the broker's and PostgreSQL's CPU and memory. go run ./bench
// -h lists the scenarios and the flags.
package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

const usageHead = `usage: go run ./bench <scenario> [flags]

scenarios:
`

const usageTail = `
front doors:
  --url and --vs may be https:// URLs; --ca FILE adds a CA (PEM) to the system's for them.
  --token T is sent as "Authorization: Bearer T" on every request to --url, --vs-token T to
  --vs; without the flags the bench reads QUEEN_BENCH_TOKEN and QUEEN_BENCH_VS_TOKEN, which
  keep a key out of the shell history. A target whose /health does not name this broker is
  measured through its HTTP API alone: no process figures, no scrape, wake sleeps 50 ms for
  a pop to park instead of reading the broker's gauge. A front door that forwards /health but
  refuses the bench /metrics/prometheus gets the same wake and no scrape.

flags:
`

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

type options struct {
	scenario string
	args     []string // after the scenario, for the report
	url, vs  string
	vsRev    string         // a revision of this repository to build and start as --vs
	rounds   int            // with a second broker: measurements of each per scenario
	token    string         // for --url: the flag, else QUEEN_BENCH_TOKEN
	vsToken  string         // for --vs: the flag, else QUEEN_BENCH_VS_TOKEN
	roots    *x509.CertPool // --ca added to the system's; nil without --ca
	mesh     string
	pg       string
	jsonPath string
	env      stringList

	duration, warmup time.Duration
	batch, size      int
	popBatch         int // mixed, cost: 0 pops --batch
	maxLag           int // mixed, cost: 0 pushes whatever the lag
	partitions       int
	conns            int
	consumers        int
	messages         int
	queues           int
	groups           int
	autoAck          bool
	samples          int
	rate             int
	every            time.Duration
	dims             []string // scale
	values           []int    // scale
	charts           string   // scale
	lagRate          int      // soak
	faultEvery       time.Duration
	faults           []string
	// The text of --dim, --values and --faults, which the scenario's check resolves.
	dimList, valueList, faultList string

	set        map[string]bool // flags given on the command line
	meshTarget *Target         // --mesh, once probed
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	o, err := parseArgs(args)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "bench:", err)
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := execute(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	if rep.Failed {
		fmt.Println("\nFAILED: see the failures above")
		return 1
	}
	return 0
}

func parseArgs(args []string) (*options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageHead+scenarioHelp()+usageTail)
		fs.PrintDefaults()
	}
	o := &options{set: map[string]bool{}}
	fs.StringVar(&o.url, "url", "", "broker base URL (default: build and start this project's broker with its own PostgreSQL)")
	fs.StringVar(&o.vs, "vs", "", "a second broker: run each scenario on both, in the order A B B A A B…, and print A/B")
	fs.IntVar(&o.rounds, "rounds", 2, "with --vs or --vs-rev: measurements of each broker per scenario, averaged")
	fs.StringVar(&o.vsRev, "vs-rev", "", "as --vs, a broker built from this repository at this revision (commit, tag, branch), started\nwith its own PostgreSQL like the first: before and after, with both brokers' CPU per message")
	ca := fs.String("ca", "", "PEM file of a CA to trust, besides the system's, for https:// targets")
	fs.StringVar(&o.token, "token", "", "API key sent as a bearer token to --url (default: $QUEEN_BENCH_TOKEN)")
	fs.StringVar(&o.vsToken, "vs-token", "", "API key sent as a bearer token to --vs (default: $QUEEN_BENCH_VS_TOKEN)")
	fs.StringVar(&o.mesh, "mesh", "", "wake: park the pop on this broker and push to --url")
	fs.StringVar(&o.pg, "pg", "", "ceiling: PostgreSQL conn string, when --url is given")
	fs.StringVar(&o.jsonPath, "json", "", "write machine-readable results to this file")
	fs.Var(&o.env, "env", "KEY=VALUE for the broker the bench starts (repeatable)")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "measured time per measurement")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured time before each measurement")
	fs.IntVar(&o.batch, "batch", 100, "messages per push request / per pop / rows per COPY")
	fs.IntVar(&o.popBatch, "pop-batch", 0, "mixed, cost: messages per pop (default: --batch)")
	fs.IntVar(&o.maxLag, "max-lag", 0, "mixed, cost: producers wait while the consumers are this many messages behind (0: never)")
	fs.IntVar(&o.size, "size", 256, "payload bytes per message")
	fs.IntVar(&o.partitions, "partitions", 10, "partitions the messages are spread over")
	fs.IntVar(&o.conns, "conns", 16, "producer connections (ceiling: PostgreSQL connections)")
	fs.IntVar(&o.consumers, "consumers", 8, "consumers (per group with --groups; streams: runners)")
	fs.IntVar(&o.messages, "messages", 200000, "consume, streams: messages pre-filled (fewer by default when --duration is short)")
	fs.IntVar(&o.groups, "groups", 0, "consume, mixed: consumer groups (0: queue mode)")
	fs.BoolVar(&o.autoAck, "autoack", false, "consume, mixed: pop with autoAck=true and no ack")
	fs.IntVar(&o.samples, "samples", 200, "wake: samples; scrape: scrapes")
	fs.IntVar(&o.queues, "queues", 10000, "scrape: queues created")
	fs.IntVar(&o.rate, "rate", 0, "mixed, soak: total push rate in msg/s (0: as fast as the broker takes it)")
	fs.DurationVar(&o.every, "every", time.Minute, "outage, soak: reporting interval")
	fs.StringVar(&o.dimList, "dim", "", "scale: dimensions, comma-separated (partitions, queues, groups, backlog, brokers; default all)")
	fs.StringVar(&o.valueList, "values", "", "scale: values of the one --dim, comma-separated (10,1k,100k,5M)")
	fs.StringVar(&o.charts, "charts", "", "scale: write one SVG chart per dimension into this directory")
	fs.IntVar(&o.lagRate, "lag-rate", 0, "soak: msg/s the lagging consumer group reads (default half of --rate)")
	fs.DurationVar(&o.faultEvery, "fault-every", 10*time.Minute, "soak: time between restarts (0: none)")
	fs.StringVar(&o.faultList, "faults", "pg,broker", "soak: what each restart restarts, cycled: pg, broker")

	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fs.Usage()
		return nil, errors.New("no scenario given")
	}
	o.scenario, o.args = args[0], args[1:]
	sc, ok := findScenario(o.scenario)
	if !ok {
		fs.Usage()
		return nil, fmt.Errorf("unknown scenario %q", o.scenario)
	}
	for name, v := range sc.defaults {
		f := fs.Lookup(name)
		if err := f.Value.Set(v); err != nil {
			return nil, fmt.Errorf("scenario %s: default --%s=%s: %w", sc.name, name, v, err)
		}
		f.DefValue = v
	}
	if err := fs.Parse(o.args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	for _, f := range ownFlags() {
		if o.set[f] && !slices.Contains(sc.own, f) {
			return nil, fmt.Errorf("--%s does not apply to %s", f, sc.name)
		}
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"batch", o.batch}, {"size", o.size}, {"partitions", o.partitions}, {"conns", o.conns}, {"consumers", o.consumers}, {"messages", o.messages}, {"samples", o.samples}, {"queues", o.queues}} {
		if v.n < 1 {
			return nil, fmt.Errorf("--%s must be at least 1", v.name)
		}
	}
	if o.rounds < 1 {
		return nil, errors.New("--rounds must be at least 1")
	}
	if o.vs != "" && o.vsRev != "" {
		return nil, errors.New("--vs and --vs-rev both name the second broker: give one")
	}
	if o.set["pop-batch"] && o.popBatch < 1 {
		return nil, errors.New("--pop-batch must be at least 1")
	}
	if o.maxLag < 0 {
		return nil, errors.New("--max-lag cannot be negative")
	}
	if o.groups < 0 || o.duration <= 0 || o.warmup < 0 {
		return nil, errors.New("--groups, --duration and --warmup cannot be negative, --duration not zero")
	}
	// A key is for one target: given for a target that is not there it would go nowhere, or
	// to the broker the bench starts. The variables are read only where their target is given.
	for _, k := range []struct {
		flag, env, target string
		url, key          *string
	}{{"token", "QUEEN_BENCH_TOKEN", "url", &o.url, &o.token}, {"vs-token", "QUEEN_BENCH_VS_TOKEN", "vs", &o.vs, &o.vsToken}} {
		switch {
		case o.set[k.flag] && *k.url == "":
			return nil, fmt.Errorf("--%s is the API key of --%s, which is not given", k.flag, k.target)
		case !o.set[k.flag] && *k.url != "":
			*k.key = os.Getenv(k.env)
		}
	}
	if *ca != "" {
		roots, err := loadCA(*ca)
		if err != nil {
			return nil, fmt.Errorf("--ca: %w", err)
		}
		o.roots = roots
	}
	if sc.ownBroker != "" && (o.url != "" || o.vs != "") {
		return nil, fmt.Errorf("%s: it runs only on brokers the bench starts (no --url, no --vs)", sc.ownBroker)
	}
	if sc.check != nil {
		if err := sc.check(o); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// redactKeys is args with the values of --token and --vs-token hidden: the command goes into
// the report, which is kept and shared.
func redactKeys(args []string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		name, _, inline := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || (name != "token" && name != "vs-token") {
			continue
		}
		if inline {
			out[i] = "--" + name + "=***"
		} else if i+1 < len(out) {
			out[i+1] = "***"
		}
	}
	return out
}

// popBatchOr is --pop-batch (or the scenario's default of it), else def.
func (o *options) popBatchOr(def int) int {
	if o.popBatch > 0 {
		return o.popBatch
	}
	return def
}

// prefillMessages is --messages, or enough for consumers at about perSec msg/s not to run
// dry; faster ones drain it early, which ends the window and is reported.
func (o *options) prefillMessages(perSec int) int {
	if o.set["messages"] {
		return o.messages
	}
	return min(o.messages, max(20000, int(float64(perSec)*(o.warmup+o.duration).Seconds())))
}

// execute sets up the targets, runs the jobs (alternating with --vs), prints the table and
// writes the JSON.
func execute(ctx context.Context, o *options) (rep *Report, err error) {
	started := time.Now()
	rep = &Report{Started: started, Command: append([]string{"bench", o.scenario}, redactKeys(o.args)...), CPUs: runtime.NumCPU(),
		LoadAverage: loadAverage()}
	fmt.Printf("load average at the start: %s\n", rep.LoadAverage)
	sc, _ := findScenario(o.scenario)
	if sc.run != nil {
		sc.run(ctx, o, rep)
		return rep, finishReport(ctx, o, rep)
	}

	// The brokers the bench started, stopped when the run ends (a failure to stop fails it).
	var own []*brokerSet
	defer func() {
		for _, bp := range slices.Backward(own) {
			if err := bp.stop(); err != nil {
				fmt.Fprintln(os.Stderr, "bench:", err)
				rep.Failed = true
			}
		}
	}()
	startTarget := func(rev string) (*Target, error) {
		bp, err := startOwn(ctx, o, rev)
		if err != nil {
			return nil, err
		}
		own = append(own, bp)
		return bp.t, nil
	}
	var a *Target
	if o.url != "" {
		a = &Target{URL: strings.TrimRight(o.url, "/"), Token: o.token, RootCAs: o.roots, PGConn: o.pg}
		if err := a.probe(); err != nil {
			return nil, err
		}
	} else if a, err = startTarget(""); err != nil {
		return nil, err
	}
	targets := []*Target{a}
	rep.Targets = []string{a.URL}
	switch {
	case o.vs != "":
		b := &Target{URL: strings.TrimRight(o.vs, "/"), Token: o.vsToken, RootCAs: o.roots}
		if err := b.probe(); err != nil {
			return nil, err
		}
		targets = append(targets, b)
		rep.Targets = append(rep.Targets, b.URL)
	case o.vsRev != "":
		b, err := startTarget(o.vsRev)
		if err != nil {
			return nil, err
		}
		targets = append(targets, b)
		rep.Targets = append(rep.Targets, b.URL+" ("+o.vsRev+")")
	}
	if o.mesh != "" {
		m := &Target{URL: strings.TrimRight(o.mesh, "/"), RootCAs: o.roots}
		if err := m.probe(); err != nil {
			return nil, err
		}
		o.meshTarget = m
	}

	var ceiling float64
	for _, j := range sc.jobs(o) {
		if ctx.Err() != nil {
			break
		}
		rounds := 1
		if len(targets) > 1 && j.name != "ceiling" {
			rounds = o.rounds
		}
		var perTarget [2][]*Result
		skipped := false
		for round := range rounds {
			for k := range targets {
				// A B, then B A: a drift of the machine over the run weighs on both alike.
				ti := k
				if round%2 == 1 {
					ti = len(targets) - 1 - k
				}
				t := targets[ti]
				if j.name == "ceiling" && ti > 0 {
					continue
				}
				r := runJob(ctx, j, t)
				r.Target = string(rune('A' + ti))
				if j.name == "ceiling" && r.Verified && ti == 0 {
					ceiling = r.MsgPerSec
				}
				skipped = skipped || r.Skipped
				perTarget[ti] = append(perTarget[ti], r)
				rep.Results = append(rep.Results, r)
				printLine(r)
			}
		}
		if rounds > 1 && !skipped {
			rep.Comparisons = append(rep.Comparisons, compare(j, perTarget[0], perTarget[1])...)
		}
	}
	for _, r := range rep.Results {
		switch r.Scenario {
		case "push", "consume", "mixed":
			// Only A's: the ceiling was measured on A's PostgreSQL.
			if ceiling > 0 && r.MsgPerSec > 0 && r.Target == "A" {
				v := r.MsgPerSec / ceiling
				r.CeilingRatio = &v
			}
		}
	}
	return rep, finishReport(ctx, o, rep)
}

// startOwn builds the broker of the working tree, or of rev when not "", and starts it with its
// own PostgreSQL.
func startOwn(ctx context.Context, o *options, rev string) (*brokerSet, error) {
	what := "./cmd/queen"
	if rev != "" {
		what += " at " + rev
	}
	fmt.Printf("starting the broker (go build %s, local PostgreSQL)...\n", what)
	return startBrokers(ctx, rev, o.env, o.scenario == "outage" || o.scenario == "soak", 1)
}

// finishReport marks the run failed if a result failed, prints the table (and the scale
// targets), writes the scale charts and the JSON.
func finishReport(ctx context.Context, o *options, rep *Report) error {
	for _, r := range rep.Results {
		if !r.Verified && !r.Skipped {
			rep.Failed = true
		}
	}
	if ctx.Err() != nil {
		rep.Failed = true
	}
	rep.ElapsedSeconds = time.Since(rep.Started).Seconds()
	fmt.Println()
	printTable(os.Stdout, rep)
	printRatios(os.Stdout, rep.Ratios)
	fmt.Printf("\ntotal time %.0f s\n", rep.ElapsedSeconds)
	if o.charts != "" {
		files, err := writeScaleCharts(o.charts, rep.Results)
		if err != nil {
			return err
		}
		fmt.Printf("charts: %s\n", strings.Join(files, " "))
	}
	if o.jsonPath != "" {
		return writeJSON(o.jsonPath, rep)
	}
	return nil
}

// loadAverage is the first three fields of /proc/loadavg: other work on the machine.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// cannotRun says why a scenario cannot run on t, "" when it can: the ceiling needs the
// PostgreSQL behind the broker, scrape the broker's own metrics page.
func cannotRun(scenario string, t *Target) string {
	switch {
	case scenario == "ceiling" && t.PGConn == "":
		return "no PostgreSQL to measure: the bench cannot see the one behind a broker it did not start (give --pg with --url)"
	case scenario == "scrape" && !t.Native:
		return fmt.Sprintf("/health at %s does not name this project's broker, whose metrics page the scrape reads", t.URL)
	case scenario == "scrape" && t.MetricsErr != nil:
		return fmt.Sprintf("the bench cannot read the metrics page at %s: %v", t.URL, t.MetricsErr)
	}
	return ""
}

// runJob runs one scenario on one target: a checkpoint first, broker log errors after. A
// scenario the target cannot serve is skipped, with the reason in its notes.
func runJob(ctx context.Context, j job, t *Target) *Result {
	if why := cannotRun(j.name, t); why != "" {
		r := &Result{Scenario: j.name, Label: j.label, URL: t.URL, Skipped: true}
		r.note("skipped: %s", why)
		return r
	}
	t.checkpoint(ctx)
	offset := t.logOffset()
	r, err := j.run(ctx, t)
	if err != nil {
		r = &Result{Scenario: j.name, Label: j.label, URL: t.URL}
		r.fail(err.Error())
		r.done()
	}
	if lines := t.logErrors(offset); len(lines) > 0 {
		r.Errors.BrokerLog = len(lines)
		r.note("the broker logged %d ERROR lines, first: %s", len(lines), lines[0])
	}
	return r
}

func printLine(r *Result) {
	if r.Skipped {
		fmt.Printf("%-44s %s\n", r.Label, r.Notes[0])
		return
	}
	status := "ok"
	if !r.Verified {
		status = "FAILED"
	}
	if r.latencyOnly() {
		fmt.Printf("%-44s p50 %.1f ms  p99 %.1f ms  %s\n", r.Label, r.Latency.P50, r.Latency.P99, status)
		return
	}
	fmt.Printf("%-44s %9s msg/s  p50 %.1f ms  p99 %.1f ms  %s\n", r.Label, fmtRate(r.MsgPerSec), r.Latency.P50, r.Latency.P99, status)
}

// compare averages each broker's rounds: msg/s, or p50 latency for wake and scrape.
func compare(j job, a, b []*Result) []Comparison {
	type metric struct {
		name string
		of   func(r *Result) *float64
	}
	metrics := []metric{{"msg/s", func(r *Result) *float64 { return &r.MsgPerSec }},
		// The CPU a message costs, where the bench sees both brokers' processes: steadier than
		// msg/s on a machine the bench, the brokers and PostgreSQL share.
		{"broker µs/msg", func(r *Result) *float64 { return r.BrokerUsPerMsg }},
		{"PG µs/msg", func(r *Result) *float64 { return r.PGUsPerMsg }}}
	if s, _ := findScenario(j.name); s.latency {
		metrics = []metric{{"p50 ms", func(r *Result) *float64 { return &r.Latency.P50 }}}
	}
	// mean is the mean of the figure over rs; false when a result lacks it.
	mean := func(m metric, rs []*Result) (float64, bool) {
		var s float64
		for _, r := range rs {
			v := m.of(r)
			if v == nil {
				return 0, false
			}
			s += *v
		}
		return s / float64(max(1, len(rs))), len(rs) > 0
	}
	var out []Comparison
	for _, m := range metrics {
		ma, okA := mean(m, a)
		mb, okB := mean(m, b)
		if !okA || !okB {
			continue
		}
		c := Comparison{Label: j.label, Metric: m.name, A: ma, B: mb}
		if c.B > 0 {
			c.Ratio = c.A / c.B
		}
		out = append(out, c)
	}
	return out
}

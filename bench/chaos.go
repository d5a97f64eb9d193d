package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"queen/failover"
	"queen/pg/patroni"
)

// ChaosConfig is the chaos run: Producers push Batch messages at a time, each to its own
// partition, and Consumers pop and acknowledge, all through both front doors with an API key,
// while one of everything is killed in turn; Hold is the load before each fault and after each
// recovery.
type ChaosConfig struct {
	Producers int           `json:"producers"`
	Consumers int           `json:"consumers"`
	Batch     int           `json:"batch"`
	Hold      time.Duration `json:"holdNs"`
}

func (c ChaosConfig) label() string {
	return fmt.Sprintf("chaos: 2 proxies, 2 brokers, 3 Patroni nodes; %d producers × %d, %d consumers", c.Producers, c.Batch, c.Consumers)
}

var chaosScenario = scenario{
	name: "chaos",
	help: "two proxies in front of two meshed brokers on a three-node Patroni cluster, producers and\nconsumers through both proxies with an API key; SIGKILL a proxy, a broker, the PostgreSQL\nprimary, SIGSTOP etcd for 10 s, restarting each, with --duration of load around each fault;\nreports each fault's refusals and recovery, then checks every acknowledged message",
	// Few connections: the faults are the measure, not the throughput.
	defaults:  map[string]string{"duration": "10s", "conns": "4", "consumers": "2", "batch": "10"},
	ownBroker: "chaos starts its own proxies, brokers and Patroni cluster",
	run: func(ctx context.Context, o *options, rep *Report) {
		cfg := ChaosConfig{Producers: o.conns, Consumers: o.consumers, Batch: o.batch, Hold: o.duration}
		rep.Results = append(rep.Results, runChaos(ctx, cfg))
	},
}

// ChaosFault is what one fault did to the clients.
type ChaosFault struct {
	Name string `json:"name"`
	// Refused counts the requests that failed at the client after its failover (both front
	// doors tried), between the fault and the next one; RefusedSeconds is from the first to the
	// last of them.
	Refused        int     `json:"refused"`
	RefusedSeconds float64 `json:"refusedSeconds"`
	// RecoverySeconds is from the fault to the first request answered after the last refusal:
	// 0 when nothing was refused.
	RecoverySeconds float64 `json:"recoverySeconds"`
}

// chaosDeployment is what the run started: the Patroni cluster, the brokers and the proxies.
type chaosDeployment struct {
	dir     string
	pg      *patroni.Cluster
	brokers []*chaosProcess
	proxies []*chaosProcess
	key     string
}

// chaosProcess is a broker or a proxy: its binary, environment and health check.
type chaosProcess struct {
	name, bin, logPath, url, health string
	env                             []string
	mu                              sync.Mutex
	proc                            *child
}

func (p *chaosProcess) start(ctx context.Context) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	return startChild(ctx, childSpec{name: p.name, bin: p.bin, logPath: p.logPath, env: p.env,
		deathSig: syscall.SIGKILL, within: 2 * time.Minute,
		started: func(c *child) {
			p.mu.Lock()
			p.proc = c
			p.mu.Unlock()
		},
		ready: func() bool {
			resp, err := hc.Get(p.url + p.health)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 200
		}})
}

// signal sends sig to the process; SIGKILL also waits for it to be gone.
func (p *chaosProcess) signal(sig syscall.Signal) {
	p.mu.Lock()
	c := p.proc
	p.mu.Unlock()
	if c == nil {
		return
	}
	_ = c.cmd.Process.Signal(sig)
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		select {
		case <-c.done:
		case <-time.After(time.Minute):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	}
}

// startChaosDeployment builds the binaries and starts Patroni, the brokers (meshed, each with
// its spool) and the proxies on one control plane, which lives on the Patroni cluster too.
func startChaosDeployment(ctx context.Context) (_ *chaosDeployment, err error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("/tmp", "queen-chaos-")
	if err != nil {
		return nil, err
	}
	d := &chaosDeployment{dir: dir}
	defer func() {
		if err != nil {
			d.stop()
		}
	}()
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	bins := map[string]string{}
	for _, name := range []string{"queen", "queen-proxy"} {
		bins[name] = filepath.Join(dir, name)
		build := exec.CommandContext(ctx, goBinary(), "build", "-o", bins[name], "./cmd/"+name)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("cannot build ./cmd/%s: %w: %s", name, err, out)
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if d.pg, err = patroni.Start(ctx, patroni.Options{Dir: filepath.Join(dir, "patroni"), Log: log}); err != nil {
		return nil, err
	}
	base := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "LOG_LEVEL=info"}
	pgEnv := func(prefix string) []string {
		return []string{prefix + "HOST=" + d.pg.Hosts(), prefix + "USER=postgres", prefix + "PASSWORD=" + d.pg.Password(), prefix + "DB=postgres"}
	}
	ports := make([]int, 6)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	peers := "127.0.0.1:" + strconv.Itoa(ports[2]) + ",127.0.0.1:" + strconv.Itoa(ports[3])
	var upstreams []string
	for i := range 2 {
		name := "broker" + strconv.Itoa(i+1)
		b := &chaosProcess{name: name, bin: bins["queen"], logPath: filepath.Join(dir, name+".log"),
			url: "http://127.0.0.1:" + strconv.Itoa(ports[i]), health: "/health"}
		b.env = append(slices.Clone(base), pgEnv("PG_")...)
		b.env = append(b.env, "PORT="+strconv.Itoa(ports[i]), "QUEEN_BIND_ADDR=127.0.0.1", "QUEEN_DATA_DIR="+filepath.Join(dir, name),
			"QUEEN_MESH_PORT="+strconv.Itoa(ports[2+i]), "QUEEN_MESH_PEERS="+peers, "QUEEN_SERVER_ID=chaos-"+name,
			"FILE_BUFFER_DB_WAIT_MS=2000", "FILE_BUFFER_FLUSH_MS=100")
		d.brokers = append(d.brokers, b)
		upstreams = append(upstreams, b.url)
	}
	for _, b := range d.brokers {
		if err := b.start(ctx); err != nil {
			return nil, err
		}
	}
	proxyEnv := append(slices.Clone(base), pgEnv("PXDB_")...)
	admin := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, bins["queen-proxy"], args...)
		cmd.Env = append(slices.Clone(proxyEnv), "USER=chaos")
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return "", fmt.Errorf("queen-proxy %s: %w: %s", strings.Join(args, " "), err, ee.Stderr)
			}
			return "", err
		}
		return string(out), nil
	}
	if _, err := admin("cells", "add", "main", "--upstream", strings.Join(upstreams, ",")); err != nil {
		return nil, err
	}
	out, err := admin("keys", "create", "--cell", "main", "--classes", "produce,consume,queue_admin")
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	d.key = strings.TrimSpace(lines[len(lines)-1])
	for i := range 2 {
		name := "proxy" + strconv.Itoa(i+1)
		p := &chaosProcess{name: name, bin: bins["queen-proxy"], logPath: filepath.Join(dir, name+".log"),
			url: "http://127.0.0.1:" + strconv.Itoa(ports[4+i]), health: "/healthz"}
		p.env = append(slices.Clone(proxyEnv), "QUEEN_PROXY_PORT="+strconv.Itoa(ports[4+i]), "QUEEN_PROXY_BIND_ADDR=127.0.0.1")
		d.proxies = append(d.proxies, p)
		if err := p.start(ctx); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func (d *chaosDeployment) stop() {
	for _, p := range append(slices.Clone(d.proxies), d.brokers...) {
		p.signal(syscall.SIGTERM)
	}
	if d.pg != nil {
		_ = d.pg.ResumeDCS()
		d.pg.Stop()
	}
	if os.Getenv("QUEEN_BENCH_KEEP") == "" {
		_ = os.RemoveAll(d.dir)
	}
}

// chaosEvent is one request's outcome, for the faults' figures.
type chaosEvent struct {
	at time.Time
	ok bool
}

// chaosLedger is what the clients saw: the pushes acknowledged, the deliveries and the acks.
type chaosLedger struct {
	mu        sync.Mutex
	events    []chaosEvent
	acked     map[int][]int        // producer → messages acknowledged to it, in order
	delivered map[int][]int        // producer (partition) → message numbers, in delivery order
	ackedMsgs map[[2]int]time.Time // messages whose ack succeeded, and when
	dupAfter  []string             // redeliveries of messages already acknowledged
}

func (l *chaosLedger) event(ok bool) {
	l.mu.Lock()
	l.events = append(l.events, chaosEvent{at: time.Now(), ok: ok})
	l.mu.Unlock()
}

type chaosMessage struct {
	TransactionID string `json:"transactionId"`
	PartitionID   string `json:"partitionId"`
	LeaseID       string `json:"leaseId"`
	Data          struct{ P, N int }
}

// runChaos runs the load and the faults in turn, then checks what the clients saw.
func runChaos(ctx context.Context, cfg ChaosConfig) *Result {
	t := &Target{URL: "chaos", Native: true}
	r := newResult("chaos", cfg.label(), t, cfg)
	d, err := startChaosDeployment(ctx)
	if err != nil {
		r.fail(err.Error())
		return r.done()
	}
	defer d.stop()
	urls := []string{d.proxies[0].url, d.proxies[1].url}
	const queue = "chaos"
	setup := failover.New(urls, d.key, 10*time.Second)
	// A lease a failed pop leaves behind delays its partition by that much.
	if err := setup.Do("POST", "/api/v1/configure", map[string]any{"queue": queue, "options": map[string]any{"leaseTime": 5}}, nil); err != nil {
		r.fail(err.Error())
		return r.done()
	}

	l := &chaosLedger{acked: map[int][]int{}, delivered: map[int][]int{}, ackedMsgs: map[[2]int]time.Time{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := range cfg.Producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := failover.New(urls, d.key, 10*time.Second)
			for n := 0; ; n += cfg.Batch {
				items := make([]map[string]any, cfg.Batch)
				for i := range items {
					items[i] = map[string]any{"queue": queue, "partition": "p" + strconv.Itoa(p),
						"transactionId": fmt.Sprintf("p%d-%d", p, n+i), "payload": map[string]any{"p": p, "n": n + i}}
				}
				// The same batch again until it is acknowledged, as a client retries.
				for {
					select {
					case <-stop:
						return
					default:
					}
					var res []struct{ Status string }
					err := c.Do("POST", "/api/v1/push", map[string]any{"items": items}, &res)
					ok := err == nil && len(res) == len(items)
					for _, x := range res {
						ok = ok && (x.Status == "queued" || x.Status == "buffered" || x.Status == "duplicate")
					}
					l.event(ok)
					if ok {
						l.mu.Lock()
						for i := range items {
							l.acked[p] = append(l.acked[p], n+i)
						}
						l.mu.Unlock()
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	consumersDone := make(chan struct{})
	var cwg sync.WaitGroup
	for range cfg.Consumers {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			c := failover.New(urls, d.key, 10*time.Second)
			for {
				select {
				case <-consumersDone:
					return
				default:
				}
				var popped struct{ Messages []chaosMessage }
				if err := c.Do("GET", "/api/v1/pop/queue/"+queue+"?batch=50&wait=true&timeout=1000", nil, &popped); err != nil {
					l.event(false)
					time.Sleep(100 * time.Millisecond)
					continue
				}
				l.event(true)
				if len(popped.Messages) == 0 {
					continue
				}
				acks := make([]map[string]any, len(popped.Messages))
				l.mu.Lock()
				for i, m := range popped.Messages {
					k := [2]int{m.Data.P, m.Data.N}
					if at, ok := l.ackedMsgs[k]; ok {
						l.dupAfter = append(l.dupAfter, fmt.Sprintf("p%d-%d (acknowledged at %s)", k[0], k[1], at.Format(time.TimeOnly)))
					}
					l.delivered[m.Data.P] = append(l.delivered[m.Data.P], m.Data.N)
					acks[i] = map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": "completed"}
				}
				l.mu.Unlock()
				var res []struct{ Success bool }
				err := c.Do("POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks}, &res)
				l.event(err == nil)
				if err != nil || len(res) != len(acks) {
					continue // unacknowledged: redelivered once the lease expires
				}
				l.mu.Lock()
				for i, m := range popped.Messages {
					if res[i].Success {
						l.ackedMsgs[[2]int{m.Data.P, m.Data.N}] = time.Now()
					}
				}
				l.mu.Unlock()
			}
		}()
	}

	hold := func() bool { return sleepCtx(ctx, cfg.Hold) }
	var faults []ChaosFault
	var marks []time.Time
	fault := func(name string, inject func() error, recover func() error) {
		if ctx.Err() != nil {
			return
		}
		marks = append(marks, time.Now())
		faults = append(faults, ChaosFault{Name: name})
		if err := inject(); err != nil {
			r.fail(fmt.Sprintf("%s: %v", name, err))
		}
		hold()
		if err := recover(); err != nil {
			r.fail(fmt.Sprintf("%s, restarting: %v", name, err))
		}
		hold()
	}
	hold()
	kill := func(p *chaosProcess) func() error {
		return func() error { p.signal(syscall.SIGKILL); return nil }
	}
	restart := func(p *chaosProcess) func() error { return func() error { return p.start(ctx) } }
	fault("SIGKILL proxy1", kill(d.proxies[0]), restart(d.proxies[0]))
	fault("SIGKILL broker1 (its spool on disk)", kill(d.brokers[0]), restart(d.brokers[0]))
	var killed *patroni.Node
	fault("SIGKILL the PostgreSQL primary's node",
		func() error {
			var err error
			if killed, err = d.pg.Leader(ctx); err != nil {
				return err
			}
			if err := killed.Kill(); err != nil {
				return err
			}
			// The node comes back only after Patroni has promoted another: a restart
			// within the leader key's ttl would merely recover the same primary.
			wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			for {
				if l, err := d.pg.Leader(wctx); err == nil && l != killed {
					return nil
				}
				if !sleepCtx(wctx, 200*time.Millisecond) {
					return fmt.Errorf("no new leader within 2 minutes of the kill: %w", wctx.Err())
				}
			}
		},
		func() error {
			if err := killed.Start(); err != nil {
				return err
			}
			wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			return d.pg.WaitHealthy(wctx, "")
		})
	fault("SIGSTOP etcd for 10 s",
		func() error {
			if err := d.pg.PauseDCS(); err != nil {
				return err
			}
			sleepCtx(ctx, 10*time.Second)
			return d.pg.ResumeDCS()
		},
		func() error { return nil })
	marks = append(marks, time.Now())
	close(stop)
	wg.Wait()

	// Every acknowledged message must come out: the consumers go on until they have.
	want := 0
	l.mu.Lock()
	for _, a := range l.acked {
		want += len(a)
	}
	l.mu.Unlock()
	allDelivered := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for p, a := range l.acked {
			seen := map[int]bool{}
			for _, n := range l.delivered[p] {
				seen[n] = true
			}
			for _, n := range a {
				if !seen[n] {
					return false
				}
			}
		}
		return true
	}
	for deadline := time.Now().Add(3 * time.Minute); !allDelivered() && time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(200 * time.Millisecond)
	}
	close(consumersDone)
	cwg.Wait()

	r.Seconds = marks[len(marks)-1].Sub(marks[0]).Seconds()
	r.setRates(int64(want), int64(len(l.events)))
	for i := range faults {
		f := &faults[i]
		var first, last time.Time
		for _, e := range l.events {
			if e.at.Before(marks[i]) || !e.at.Before(marks[i+1]) || e.ok {
				continue
			}
			f.Refused++
			if first.IsZero() {
				first = e.at
			}
			last = e.at
		}
		if f.Refused > 0 {
			f.RefusedSeconds = last.Sub(first).Seconds()
			for _, e := range l.events {
				if e.ok && e.at.After(last) {
					f.RecoverySeconds = e.at.Sub(marks[i]).Seconds()
					break
				}
			}
		}
		r.note("%-40s refused %4d requests over %5.1f s; recovered %5.1f s after the fault", f.Name, f.Refused, f.RefusedSeconds, f.RecoverySeconds)
	}
	r.Chaos = faults

	// What the clients saw: every acknowledged message delivered, in order per partition,
	// redelivered only if its ack had not succeeded.
	lost, delivered, dups := 0, 0, 0
	for p, a := range l.acked {
		firsts := []int{}
		seen := map[int]int{}
		for _, n := range l.delivered[p] {
			seen[n]++
			if seen[n] == 1 {
				firsts = append(firsts, n)
			} else {
				dups++
			}
		}
		delivered += len(firsts)
		for _, n := range a {
			if seen[n] == 0 {
				lost++
			}
		}
		if !slices.IsSorted(firsts) {
			r.fail(fmt.Sprintf("partition p%d: first deliveries out of order", p))
		}
	}
	r.note("%d messages acknowledged to producers, %d delivered (%d lost), %d redelivered", want, delivered, lost, dups)
	if lost > 0 {
		r.fail(fmt.Sprintf("%d acknowledged messages were never delivered", lost))
	}
	if len(l.dupAfter) > 0 {
		r.fail(fmt.Sprintf("%d messages delivered again after their ack succeeded, e.g. %s", len(l.dupAfter), l.dupAfter[0]))
	}
	for _, b := range d.brokers {
		var st struct{ Pending int64 }
		resp, err := http.Get(b.url + "/api/v1/status/buffers")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
		}
		switch {
		case err != nil:
			r.fail(fmt.Sprintf("%s: cannot read its spool: %v", b.name, err))
		case st.Pending != 0:
			r.fail(fmt.Sprintf("%s: %d records still in its spool", b.name, st.Pending))
		default:
			r.note("%s: spool drained", b.name)
		}
	}
	return r.done()
}

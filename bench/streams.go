package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// StreamsConfig is the streams scenario: a source queue pre-filled with Messages messages over
// Partitions (untimed), a stream query registered on it, and Consumers runners doing what a
// streaming SDK's runner does: pop up to Batch messages with the query's consumer group, read
// the state of the windows the batch touches, count the batch into the partition's tumbling
// windows, and commit one cycle per batch: the windows' new state, one summary message to a
// sink queue and the ack of the batch, in one transaction of the broker.
type StreamsConfig struct {
	Messages   int           `json:"messages"`   // pre-filled in the source
	Consumers  int           `json:"consumers"`  // runners
	Batch      int           `json:"batch"`      // messages per pop, so per cycle at most
	Size       int           `json:"size"`       // payload bytes per source message
	Partitions int           `json:"partitions"` // of the source
	Duration   time.Duration `json:"durationNs"`
	Warmup     time.Duration `json:"warmupNs"`
}

// streamWindow is the width of a tumbling window, in messages: a message falls in window
// s / streamWindow of its partition, s being its producer's sequence number in the payload.
const streamWindow = 1000

// streamIdle ends the runners when no cycle committed for this long though messages are
// missing: a broker that lost them would otherwise keep them waiting for ever.
const streamIdle = 10 * time.Second

func (c StreamsConfig) label() string {
	return fmt.Sprintf("streams pop%d+state+cycle c%d p%d", c.Batch, c.Consumers, c.Partitions)
}

var streamsScenario = scenario{
	name:     "streams",
	help:     "stream-query runners over a pre-filled queue: pop, state/get, one cycle per batch\n(window counts, a sink summary, the ack); --consumers runners",
	own:      []string{"messages"},
	defaults: map[string]string{"consumers": "4"},
	jobs: func(o *options) []job {
		cfg := StreamsConfig{Messages: o.prefillMessages(30000), Consumers: o.consumers, Batch: o.batch,
			Size: o.size, Partitions: o.partitions, Duration: o.duration, Warmup: o.warmup}
		return []job{newJob("streams", cfg, RunStreams)}
	},
}

// postJSON sends in as a JSON body and decodes the answer into out.
func (h *conn) postJSON(path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("cannot encode the body of %s: %w", path, err)
	}
	b, err := h.do("POST", path, body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("cannot decode the answer of %s %.200q: %w", path, b, err)
	}
	return nil
}

// streamQuery is a registered query as its runners hold it.
type streamQuery struct {
	id, group, sink string
}

func registerStream(h *conn, source, sink string) (*streamQuery, error) {
	var a struct {
		Success bool   `json:"success"`
		QueryID string `json:"query_id"`
		Error   string `json:"error"`
	}
	err := h.postJSON("/streams/v1/queries", map[string]string{
		"name": source + ".count", "source_queue": source, "sink_queue": sink, "config_hash": "bench-window-count",
	}, &a)
	if err != nil {
		return nil, fmt.Errorf("cannot register the stream query: %w", err)
	}
	if !a.Success || a.QueryID == "" {
		return nil, fmt.Errorf("cannot register the stream query: success %v, error %q", a.Success, a.Error)
	}
	return &streamQuery{id: a.QueryID, group: "streams." + a.QueryID, sink: sink}, nil
}

// windowState is the state value of one window.
type windowState struct {
	Count int64 `json:"count"`
}

type stateRowAnswer struct {
	Key   string      `json:"key"`
	Value windowState `json:"value"`
}

// state reads the state of the partition: the given keys, or every key when keys is nil.
func (q *streamQuery) state(h *conn, partitionID string, keys []string) ([]stateRowAnswer, error) {
	in := struct {
		QueryID     string   `json:"query_id"`
		PartitionID string   `json:"partition_id"`
		Keys        []string `json:"keys,omitempty"`
	}{q.id, partitionID, keys}
	var a struct {
		Success bool             `json:"success"`
		Rows    []stateRowAnswer `json:"rows"`
	}
	if err := h.postJSON("/streams/v1/state/get", in, &a); err != nil {
		return nil, err
	}
	if !a.Success {
		return nil, fmt.Errorf("state/get of partition %s answered success:false", partitionID)
	}
	return a.Rows, nil
}

// sinkSummary is the sink message of one cycle.
type sinkSummary struct {
	Partition string  `json:"partition"`
	Count     int64   `json:"count"`
	Windows   []int64 `json:"windows"`
}

type sinkMsg struct {
	Data sinkSummary `json:"data"`
}

type stateOp struct {
	Type  string      `json:"type"`
	Key   string      `json:"key"`
	Value windowState `json:"value"`
}

type sinkItem struct {
	Queue     string      `json:"queue"`
	Partition string      `json:"partition"`
	Payload   sinkSummary `json:"payload"`
}

type cycleAck struct {
	TransactionID string `json:"transactionId"`
	LeaseID       string `json:"leaseId"`
}

type cycleBody struct {
	QueryID       string     `json:"query_id"`
	PartitionID   string     `json:"partition_id"`
	ConsumerGroup string     `json:"consumer_group"`
	StateOps      []stateOp  `json:"state_ops"`
	PushItems     []sinkItem `json:"push_items"`
	Ack           cycleAck   `json:"ack"`
}

func windowKey(w int64) string { return "w" + strconv.FormatInt(w, 10) }

// partTally is what the committed cycles counted in one source partition.
type partTally struct {
	name    string
	windows map[string]int64 // by state key
	count   int64
}

// streamTally is what the committed cycles counted, on the client's side: the truth the
// broker's state and sink are checked against.
type streamTally struct {
	mu      sync.Mutex
	parts   map[string]*partTally // by partition id
	total   atomic.Int64          // source messages counted by committed cycles
	cycles  atomic.Int64          // committed cycles
	refused atomic.Int64          // cycles answered success:false
	reason  atomic.Pointer[string]
}

func newStreamTally() *streamTally { return &streamTally{parts: map[string]*partTally{}} }

// add files a committed cycle and returns the messages counted so far.
func (t *streamTally) add(partitionID, partition string, batch map[string]int64, n int) int64 {
	t.mu.Lock()
	p := t.parts[partitionID]
	if p == nil {
		p = &partTally{name: partition, windows: map[string]int64{}}
		t.parts[partitionID] = p
	}
	for k, c := range batch {
		p.windows[k] += c
	}
	p.count += int64(n)
	t.mu.Unlock()
	t.cycles.Add(1)
	return t.total.Add(int64(n))
}

func (t *streamTally) refuse(reason string) {
	t.refused.Add(1)
	t.reason.CompareAndSwap(nil, &reason)
}

// checkState compares one partition's state rows with what its committed cycles counted and
// returns the sum of the rows' counts and one line per window that differs.
func (p *partTally) checkState(rows []stateRowAnswer) (sum int64, fails []string) {
	seen := make(map[string]bool, len(rows))
	for _, r := range rows {
		sum += r.Value.Count
		seen[r.Key] = true
		if want := p.windows[r.Key]; r.Value.Count != want {
			fails = append(fails, fmt.Sprintf("partition %s window %s: the state counts %d, the committed cycles %d", p.name, r.Key, r.Value.Count, want))
		}
	}
	for k, want := range p.windows {
		if !seen[k] {
			fails = append(fails, fmt.Sprintf("partition %s window %s: no state, the committed cycles counted %d", p.name, k, want))
		}
	}
	return sum, fails
}

// checkSink compares the sink's summaries with the committed cycles: one each, the counts
// summing per partition to what the cycles counted.
func (t *streamTally) checkSink(sink []sinkSummary) []string {
	var fails []string
	if n, want := int64(len(sink)), t.cycles.Load(); n != want {
		fails = append(fails, fmt.Sprintf("the sink holds %d summaries for %d committed cycles", n, want))
	}
	perPartition := map[string]int64{}
	var sum int64
	for _, s := range sink {
		perPartition[s.Partition] += s.Count
		sum += s.Count
	}
	if total := t.total.Load(); sum != total {
		fails = append(fails, fmt.Sprintf("the sink's summaries count %d messages, the committed cycles %d", sum, total))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.parts {
		if got := perPartition[p.name]; got != p.count {
			fails = append(fails, fmt.Sprintf("partition %s: the sink's summaries count %d messages, the committed cycles %d", p.name, got, p.count))
		}
	}
	return fails
}

// streamRunner is one runner of the query.
type streamRunner struct {
	q     *streamQuery
	conn  *conn
	path  string
	log   *groupLog // the batches of the committed cycles
	tally *streamTally
	errs  *errorCounts
}

// round is one runner cycle: a pop, a read of the state of the windows the batch touches, and
// the commit. It returns the messages the committed cycle counted (0 when the pop brought
// nothing or the cycle failed), the requests sent, the time the commit request took, and the
// messages counted so far.
func (r *streamRunner) round() (n, reqs int, commit time.Duration, total int64) {
	sent := now()
	msgs, err := r.conn.pop(r.path)
	recv := now()
	if err != nil {
		r.errs.note(err)
		time.Sleep(50 * time.Millisecond) // no hot loop against a failing broker
		return 0, 1, 0, r.tally.total.Load()
	}
	if len(msgs) == 0 {
		return 0, 1, 0, r.tally.total.Load()
	}
	first, last := msgs[0], msgs[len(msgs)-1]
	batch := map[string]int64{}
	var keys []string
	var windows []int64
	for _, m := range msgs {
		if m.PartitionID != first.PartitionID {
			// A cycle belongs to one source partition: a runner could not commit this batch.
			r.errs.items.Add(1)
			r.errs.firstIs(fmt.Sprintf("a pop delivered partitions %s and %s in one batch", first.Partition, m.Partition))
			return 0, 1, 0, r.tally.total.Load()
		}
		w := m.Data.S / streamWindow
		k := windowKey(w)
		if batch[k] == 0 {
			keys, windows = append(keys, k), append(windows, w)
		}
		batch[k]++
	}
	rows, err := r.q.state(r.conn, first.PartitionID, keys)
	if err != nil {
		r.errs.note(err)
		return 0, 2, 0, r.tally.total.Load()
	}
	prior := make(map[string]int64, len(rows))
	for _, row := range rows {
		prior[row.Key] = row.Value.Count
	}
	ops := make([]stateOp, len(keys))
	for i, k := range keys {
		ops[i] = stateOp{Type: "upsert", Key: k, Value: windowState{Count: prior[k] + batch[k]}}
	}
	body := cycleBody{QueryID: r.q.id, PartitionID: first.PartitionID, ConsumerGroup: r.q.group, StateOps: ops,
		PushItems: []sinkItem{{Queue: r.q.sink, Partition: first.Partition,
			Payload: sinkSummary{Partition: first.Partition, Count: int64(len(msgs)), Windows: windows}}},
		Ack: cycleAck{TransactionID: last.TransactionID, LeaseID: last.LeaseID}}
	var a struct {
		Success bool   `json:"success"`
		Error   string `json:"error"`
	}
	start := now()
	err = r.conn.postJSON("/streams/v1/cycle", body, &a)
	commit = now() - start
	switch {
	case err != nil:
		r.errs.note(err)
		return 0, 3, commit, r.tally.total.Load()
	case !a.Success:
		// Refused whole (a lease that expired, say): the batch comes back to a runner.
		r.tally.refuse(a.Error)
		return 0, 3, commit, r.tally.total.Load()
	}
	r.log.record(msgs, sent, recv)
	return len(msgs), 3, commit, r.tally.add(first.PartitionID, first.Partition, batch, len(msgs))
}

// streamStats are the measured figures of the runners.
type streamStats struct {
	msgs, reqs, cycles atomic.Int64
	rounds, commits    []latencies // one each per runner
}

// runStreamRunners runs the runners until every one of the expect messages is counted by a
// committed cycle, or no cycle commits for streamIdle. The window opens once a tenth is
// counted and closes when the last is; the runners keep going after a window that ends first,
// untimed, so that every message is counted for the verification.
func runStreamRunners(ctx context.Context, c *client, q *streamQuery, popPath string, g *groupLog, tally *streamTally,
	runners int, expect int64, w *window, errs *errorCounts) *streamStats {
	st := &streamStats{rounds: make([]latencies, runners), commits: make([]latencies, runners)}
	var lastCommit atomic.Int64
	lastCommit.Store(int64(now()))
	var wg sync.WaitGroup
	for i := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &streamRunner{q: q, conn: c.conn(), path: popPath, log: g, tally: tally, errs: errs}
			for ctx.Err() == nil && tally.total.Load() < expect && now()-time.Duration(lastCommit.Load()) < streamIdle {
				sent := now()
				n, reqs, commit, total := r.round()
				done := now()
				if n > 0 {
					lastCommit.Store(int64(done))
				}
				if total >= expect/10 {
					w.open(done)
				}
				if w.in(done) {
					st.reqs.Add(int64(reqs))
					if n > 0 {
						st.msgs.Add(int64(n))
						st.cycles.Add(1)
						st.rounds[i] = append(st.rounds[i], done-sent)
						st.commits[i] = append(st.commits[i], commit)
					}
				}
				if total >= expect && total-int64(n) < expect {
					w.close(done)
				}
			}
		}()
	}
	wg.Wait()
	return st
}

// RunStreams pre-fills the source, registers the query, measures the runners, then checks that
// every pre-filled message was counted by exactly one committed cycle, that the state holds
// what the cycles counted, window by window, and that the sink holds one summary per cycle.
func RunStreams(ctx context.Context, t *Target, cfg StreamsConfig) (*Result, error) {
	c, err := t.client()
	if err != nil {
		return nil, err
	}
	var errs errorCounts
	src, err := prefill(ctx, cfg.label(), c, "streams", cfg.Partitions, cfg.Size, int64(cfg.Messages), &errs)
	if err != nil {
		return nil, err
	}
	sink := src.queue + "-sink"
	q, err := registerStream(c.conn(), src.queue, sink)
	if err != nil {
		return nil, err
	}
	expect := src.expect
	g := newGroupLog(q.group, src.parts, cfg.Size)
	tally := newStreamTally()
	// A short long-poll: a runner that finds nothing comes back soon, as the SDKs' do.
	popPath := popParams{queue: src.queue, group: q.group, batch: cfg.Batch, wait: true, timeout: 500 * time.Millisecond}.path()

	w := startWindow(ctx, t, cfg.Warmup, cfg.Duration)
	stopProgress := startProgress(cfg.label(), w, func() string {
		return fmt.Sprintf("counted %s of %s  cycles %d  refused %d  errors %d",
			count(tally.total.Load()), count(expect), tally.cycles.Load(), tally.refused.Load(), errs.total())
	})
	st := runStreamRunners(ctx, c, q, popPath, g, tally, cfg.Consumers, expect, w, &errs)
	stopProgress()
	r := newResult("streams", cfg.label(), t, cfg)
	w.finish(r)
	r.setRates(st.msgs.Load(), st.reqs.Load())
	r.Latency = percentiles(st.rounds...)
	if r.Seconds > 0 {
		cps := float64(st.cycles.Load()) / r.Seconds
		r.CyclesPerSec = &cps
		commit := percentiles(st.commits...)
		r.note("%.0f cycles/s of %.1f messages on average; the latency columns are the runner's round (pop + state/get + cycle), the cycle request alone p50 %.1f / p99 %.1f ms",
			cps, float64(st.msgs.Load())/float64(max(1, st.cycles.Load())), commit.P50, commit.P99)
	}
	r.CyclesRefused = tally.refused.Load()
	if n := tally.refused.Load(); n > 0 {
		r.note("%d cycles refused (success:false), their batches counted again by later cycles; first: %s", n, *tally.reason.Load())
	}
	if !r.notePrefill(w, src, cfg.Duration) {
		r.note("the window ended with messages left: the runners counted them through cycles after it, untimed")
	}

	// Every pre-filled message in exactly one committed cycle, intact and in order.
	r.fail(g.check(src.led)...)
	r.fail(checkStreamState(c.conn(), q, tally)...)
	var mu sync.Mutex
	var summaries []sinkSummary
	var got atomic.Int64
	sinkPath := popParams{queue: sink, batch: 1000, autoAck: true}.path()
	drainQueue(ctx, cfg.label(), "the sink", c, sinkPath, tally.cycles.Load(), got.Load, func(msgs []sinkMsg, _, _ time.Duration) {
		mu.Lock()
		for _, m := range msgs {
			summaries = append(summaries, m.Data)
		}
		mu.Unlock()
		got.Add(int64(len(msgs)))
	}, &errs)
	r.fail(tally.checkSink(summaries)...)
	r.setErrors(&errs)
	return r.done(), nil
}

// checkStreamState reads every partition's state and compares it, window by window, with what
// the committed cycles counted; their sum must be every message counted.
func checkStreamState(h *conn, q *streamQuery, tally *streamTally) []string {
	tally.mu.Lock()
	defer tally.mu.Unlock()
	var fails []string
	var sum int64
	for id, p := range tally.parts {
		rows, err := q.state(h, id, nil)
		if err != nil {
			fails = append(fails, fmt.Sprintf("cannot read the state of partition %s: %v", p.name, err))
			continue
		}
		s, f := p.checkState(rows)
		sum += s
		fails = append(fails, f...)
	}
	if len(fails) > 8 {
		fails = append(fails[:8], fmt.Sprintf("and %d more", len(fails)-8))
	}
	if total := tally.total.Load(); sum != total {
		fails = append(fails, fmt.Sprintf("the state's windows count %d messages, the committed cycles %d", sum, total))
	}
	return fails
}

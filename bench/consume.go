package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ConsumeConfig is the consume scenario: a queue pre-filled with Messages messages (untimed),
// then Consumers consumers per group popping Batch at a time with a long-poll, each pop followed
// by one ack/batch of the whole batch, or no ack with AutoAck. Groups 0 is queue mode; N > 0 is N
// consumer groups reading the same messages (fan-out).
type ConsumeConfig struct {
	Messages   int           `json:"messages"`
	Consumers  int           `json:"consumers"`
	Batch      int           `json:"batch"`
	Groups     int           `json:"groups"`
	AutoAck    bool          `json:"autoAck"`
	Size       int           `json:"size"`
	Partitions int           `json:"partitions"`
	Duration   time.Duration `json:"durationNs"`
	Warmup     time.Duration `json:"warmupNs"`
}

func (c ConsumeConfig) label() string {
	mode := "+ack"
	if c.AutoAck {
		mode = " autoAck"
	}
	if c.Groups > 0 {
		return fmt.Sprintf("fan-out %dg×%dc pop%d%s", c.Groups, c.Consumers, c.Batch, mode)
	}
	return fmt.Sprintf("consume pop%d%s c%d", c.Batch, mode, c.Consumers)
}

var consumeScenario = scenario{
	name: "consume",
	help: "consumers draining a pre-filled queue: pop + ack/batch, or --autoack; --groups for fan-out",
	own:  []string{"messages", "groups", "autoack"},
	jobs: func(o *options) []job { return []job{newJob("consume", o.consume(), RunConsume)} },
}

func (o *options) consume() ConsumeConfig {
	return ConsumeConfig{Messages: o.prefillMessages(10000), Consumers: o.consumers, Batch: o.batch, Groups: o.groups,
		AutoAck: o.autoAck, Size: o.size, Partitions: o.partitions, Duration: o.duration, Warmup: o.warmup}
}

// groupNames are the consumer groups of a run: "" (queue mode) when groups is 0.
func groupNames(groups int) []string {
	if groups == 0 {
		return []string{""}
	}
	out := make([]string, groups)
	for i := range out {
		out[i] = "g" + strconv.Itoa(i)
	}
	return out
}

func displayGroup(g string) string {
	if g == "" {
		return "queue mode"
	}
	return "group " + g
}

// consumer pops and acks for one group, from one queue or rotating over several.
type consumer struct {
	conn    *conn
	paths   []string // one pop path per queue
	turn    *atomic.Int64
	group   string
	autoAck bool
	log     *groupLog
	errs    *errorCounts
	ackBuf  []byte
}

// readers is where consumers pop: consumer i talks to broker clients[i%len(clients)];
// partitions is the pop's partitions parameter (0: omitted). With several queues, every pop
// takes the next queue of turn, which all consumers of the readers share, also from one run of
// consumers to the next: the queues are drained evenly, so a pop finds an empty queue only once
// all are nearly empty. Consumers going round on their own would each visit every queue and
// find the ones a consumer ahead of them had just drained, each costing a full long-poll.
type readers struct {
	clients    []*client
	queues     []string
	partitions int
	turn       *atomic.Int64
}

func oneQueue(c *client, queue string) readers {
	return readers{clients: []*client{c}, queues: []string{queue}}
}

// popPartitions is the pop's partitions parameter for a batch of batch messages over partitions
// holding depth messages each: as many as a full batch needs, at most 100. A pop of one
// partition at a time would measure a shape no consumer of a wide, shallow queue runs.
func popPartitions(batch int, depth int64) int {
	return int(min(100, (int64(batch)+max(depth, 1)-1)/max(depth, 1)))
}

func newConsumer(r readers, slot int, group string, batch int, autoAck bool, g *groupLog, errs *errorCounts) *consumer {
	cn := &consumer{conn: r.clients[slot%len(r.clients)].conn(), turn: r.turn, group: group, autoAck: autoAck, log: g, errs: errs}
	for _, q := range r.queues {
		// timeout=1000: a long-poll that finds nothing costs a request per second.
		p := popParams{queue: q, group: group, batch: batch, wait: true, timeout: time.Second, autoAck: autoAck, partitions: r.partitions}
		cn.paths = append(cn.paths, p.path())
	}
	return cn
}

// nextPath is the pop path of the next cycle: the queue's, or the next of the readers' turn.
func (c *consumer) nextPath() string {
	if len(c.paths) == 1 {
		return c.paths[0]
	}
	return c.paths[c.turn.Add(1)%int64(len(c.paths))]
}

// cycle is one pop and, unless autoAck, one ack of what it brought. It returns the messages
// received, the HTTP requests sent, and the group's count after recording them.
func (c *consumer) cycle() (n, reqs int, total int64) {
	sent := now()
	msgs, err := c.conn.pop(c.nextPath())
	if err != nil {
		c.errs.note(err)
		time.Sleep(50 * time.Millisecond) // no hot loop against a failing broker
		return 0, 1, c.log.count.Load()
	}
	if len(msgs) == 0 {
		return 0, 1, c.log.count.Load()
	}
	// Recorded before the ack: the next batch of the partition cannot be delivered before it.
	total = c.log.record(msgs, sent, now())
	if c.autoAck {
		return len(msgs), 1, total
	}
	c.ackBuf = ackBody(c.ackBuf[:0], msgs, c.group)
	failed, err := c.conn.ack(c.ackBuf, len(msgs))
	switch {
	case err != nil:
		c.errs.note(err)
	case failed > 0:
		c.errs.items.Add(int64(failed))
		c.errs.firstIs(fmt.Sprintf("%d of %d acks answered success:false", failed, len(msgs)))
	}
	return len(msgs), 2, total
}

// consumeStats are the measured figures of a set of consumers.
type consumeStats struct {
	msgs, reqs atomic.Int64
	lats       []latencies // one per consumer
}

// runConsumers runs consumers per group until the window is over or, when expect > 0, every
// group has received expect messages (which ends the window early). With expect > 0 the warmup
// also ends once a tenth of the messages are delivered, so a fast broker is not measured on
// the last few messages only. Latency is per cycle that brought messages: pop plus ack.
func runConsumers(r readers, groups []*groupLog, consumers, batch int, autoAck bool, expect int64, w *window, errs *errorCounts) *consumeStats {
	st := &consumeStats{lats: make([]latencies, len(groups)*consumers)}
	var groupsDone, delivered atomic.Int64
	warm := expect * int64(len(groups)) / 10
	var wg sync.WaitGroup
	for gi, g := range groups {
		for k := range consumers {
			wg.Add(1)
			go func(slot int) {
				defer wg.Done()
				cn := newConsumer(r, slot, g.group, batch, autoAck, g, errs)
				for !w.over() && (expect <= 0 || g.count.Load() < expect) {
					sent := now()
					n, reqs, total := cn.cycle()
					done := now()
					if expect > 0 && delivered.Add(int64(n)) >= warm {
						w.open(done)
					}
					if w.in(done) {
						st.reqs.Add(int64(reqs))
						if n > 0 {
							st.msgs.Add(int64(n))
							st.lats[slot] = append(st.lats[slot], done-sent)
						}
					}
					// The consumer whose batch completed the group ends it; the last group
					// to finish ends the window.
					if expect > 0 && total >= expect && total-int64(n) < expect {
						if groupsDone.Add(1) == int64(len(groups)) {
							w.close(done)
						}
					}
				}
			}(gi*consumers + k)
		}
	}
	wg.Wait()
	return st
}

// prefilled is a fresh queue pre-filled for a scenario's consumers.
type prefilled struct {
	queue    string
	parts    []string
	led      *ledger
	expect   int64   // messages stored
	fillTime float64 // seconds the pre-fill took
}

// prefill creates a fresh queue named after prefix and pushes messages to it over partitions
// (untimed, with a progress line), with large batches from a few producers. The pushes go to
// the partitions in turn, each of at most an equal share, so every partition gets a backlog.
func prefill(ctx context.Context, label string, c *client, prefix string, partitions, size int, messages int64, errs *errorCounts) (*prefilled, error) {
	queue, parts := freshQueue(prefix), partitionNames(partitions)
	led := newLedger(fillProducers)
	// Each request spreads over consecutive partitions, an equal share each, so every
	// partition gets a backlog whatever their number.
	run := int(min(fillBatch, max(1, (messages+int64(partitions)-1)/int64(partitions))))
	secs, err := fill(ctx, label, []*client{c}, []string{queue}, parts, size, messages, run, led, errs)
	if err != nil {
		return nil, err
	}
	return &prefilled{queue: queue, parts: parts, led: led, expect: led.expected(), fillTime: secs}, nil
}

// The pre-fill's producers (ids 0..fillProducers-1 of its ledger) and messages per request.
const fillProducers, fillBatch = 4, 1000

// fill pushes messages over parts of queues (untimed, with a progress line) from fillProducers
// producers spread over the brokers of clients, in requests of fillBatch messages, each spread
// over consecutive partitions with run messages per partition (fillBatch: one partition per
// request). It returns the seconds it took.
func fill(ctx context.Context, label string, clients []*client, queues, parts []string, size int, messages int64, run int, led *ledger, errs *errorCounts) (float64, error) {
	started := time.Now()
	stopProgress := startProgress(label, nil, func() string {
		return fmt.Sprintf("pre-filling %s of %d", count(led.expected()), messages)
	})
	defer stopProgress()
	run = max(1, min(run, fillBatch))
	var next atomic.Int64 // messages claimed so far
	var wg sync.WaitGroup
	for i := range fillProducers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := newProducer(i, clients[i%len(clients)], queues[0], parts, size, led, errs)
			p.queues = queues
			for ctx.Err() == nil && errs.total() == 0 {
				k := next.Add(fillBatch)
				if k-fillBatch >= messages {
					return
				}
				p.pushSpread(int(k-fillBatch), int(min(fillBatch, messages-(k-fillBatch))), run)
			}
		}()
	}
	wg.Wait()
	if e := errs.snapshot(); errs.total() > 0 {
		return 0, fmt.Errorf("cannot pre-fill the queue: %d errors, first: %s", errs.total(), e.First)
	}
	return time.Since(started).Seconds(), ctx.Err()
}

// notePrefill notes the pre-fill and, when the consumers took every message before the
// window's end, that the rates are over that shorter time (a failure when they took them during
// the warmup). It reports whether they did.
func (r *Result) notePrefill(w *window, src *prefilled, duration time.Duration) bool {
	expect, fillTime := src.expect, src.fillTime
	r.note("pre-filled %s messages in %.1f s (%s msg/s, pushes of up to 1000 from 4 connections, untimed)",
		count(expect), fillTime, fmtRate(float64(expect)/fillTime))
	if !w.endedEarly() {
		return false
	}
	r.note("all %s pre-filled messages consumed after %.1f s of the %.1f s window: rate is over that time",
		count(expect), r.Seconds, duration.Seconds())
	if r.Seconds <= 0 {
		r.fail(fmt.Sprintf("the consumers drained the %d pre-filled messages during the warmup: raise --messages", expect))
	}
	return true
}

// RunConsume pre-fills a queue, measures the consumers, drains what they left (untimed) and
// checks every group received every message once, intact and in order.
func RunConsume(ctx context.Context, t *Target, cfg ConsumeConfig) (*Result, error) {
	c, err := t.client()
	if err != nil {
		return nil, err
	}
	name := "consume"
	if cfg.Groups > 0 {
		name = "fan-out"
	}
	var errs errorCounts
	src, err := prefill(ctx, cfg.label(), c, name, cfg.Partitions, cfg.Size, int64(cfg.Messages), &errs)
	if err != nil {
		return nil, err
	}
	queue, expect := src.queue, src.expect
	var groups []*groupLog
	for _, g := range groupNames(cfg.Groups) {
		groups = append(groups, newGroupLog(g, src.parts, cfg.Size))
	}

	w := startWindow(ctx, t, cfg.Warmup, cfg.Duration)
	stopProgress := startProgress(cfg.label(), w, func() string {
		var got int64
		for _, g := range groups {
			got += g.count.Load()
		}
		return fmt.Sprintf("delivered %s of %s  errors %d", count(got), count(expect*int64(len(groups))), errs.total())
	})
	rd := oneQueue(c, queue)
	if n := popPartitions(cfg.Batch, expect/int64(len(src.parts))); n > 1 {
		rd.partitions = n
	}
	st := runConsumers(rd, groups, cfg.Consumers, cfg.Batch, cfg.AutoAck, expect, w, &errs)
	stopProgress()
	r := newResult(name, cfg.label(), t, cfg)
	w.finish(r)
	r.setRates(st.msgs.Load(), st.reqs.Load())
	r.Latency = percentiles(st.lats...)
	if rd.partitions > 0 {
		r.note("pops of %d over up to %d partitions: %s messages pre-filled per partition", cfg.Batch, rd.partitions, count(expect/int64(len(src.parts))))
	}
	if !r.notePrefill(w, src, cfg.Duration) {
		r.note("window ended with messages left (%d pre-filled per group)", expect)
	}

	var left int64
	for _, g := range groups {
		before := g.count.Load()
		drain(ctx, cfg.label(), c, queue, g, expect, &errs)
		left += g.count.Load() - before
		r.fail(g.check(src.led)...)
	}
	if left > 0 {
		r.note("%s messages left after the window were drained with autoAck to verify", count(left))
	}
	r.setErrors(&errs)
	return r.done(), nil
}

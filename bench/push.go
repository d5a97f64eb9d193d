package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// PushConfig is the push scenario: Conns producers, each sending requests of Batch messages of
// about Size bytes to one partition at a time, rotating over Partitions.
type PushConfig struct {
	Batch      int           `json:"batch"`
	Size       int           `json:"size"`
	Partitions int           `json:"partitions"`
	Conns      int           `json:"conns"`
	Duration   time.Duration `json:"durationNs"`
	Warmup     time.Duration `json:"warmupNs"`
}

func (c PushConfig) label() string {
	return fmt.Sprintf("push %d×%dB p%d c%d", c.Batch, c.Size, c.Partitions, c.Conns)
}

var pushScenario = scenario{
	name: "push",
	help: "producers pushing batches to rotating partitions",
	jobs: func(o *options) []job { return []job{newJob("push", o.push(), RunPush)} },
}

func (o *options) push() PushConfig {
	return PushConfig{Batch: o.batch, Size: o.size, Partitions: o.partitions, Conns: o.conns, Duration: o.duration, Warmup: o.warmup}
}

// producer pushes one producer's messages. Its sequence numbers are dense from 0, its ledger
// row is its own.
type producer struct {
	id    int
	conn  *conn
	queue string
	// queues, when set, spread parts over them: partition k is in queue
	// queues[k*len(queues)/len(parts)], and queue is unused.
	queues []string
	parts  []string
	size   int
	led    *ledger
	errs   *errorCounts
	seq    int64
	body   []byte
	// spooled takes the disk spool's answers as the outage scenario expects them: an item
	// answered "buffered" is stored (and must be delivered), a 503 spool_full answer stored
	// nothing and is no error. buffered and refused count those items so far.
	spooled           bool
	buffered, refused int64
}

func newProducer(id int, c *client, queue string, parts []string, size int, led *ledger, errs *errorCounts) *producer {
	return &producer{id: id, conn: c.conn(), queue: queue, parts: parts, size: size, led: led, errs: errs}
}

// push sends one request of n messages to partition k and returns how many were stored:
// answered queued, or buffered when spooled.
func (p *producer) push(k, n int) int { return p.pushSpread(k*n, n, n) }

// pushSpread pushes messages m to m+n-1 of a sequence that gives each partition in turn run
// messages: message i goes to partition i/run (round the partitions). One request then fills
// many partitions (a pre-fill of 100k partitions), and consecutive requests fill every
// partition evenly whether or not a request ends where a partition's run does.
func (p *producer) pushSpread(m, n, run int) int {
	b := append(p.body[:0], `{"items":[`...)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		kk := (m + i) / run % len(p.parts)
		b = append(b, `{"queue":`...)
		b = appendJSONString(b, p.queueOf(kk))
		b = append(b, `,"partition":`...)
		b = appendJSONString(b, p.parts[kk])
		b = append(b, `,"transactionId":"`...)
		b = appendTxID(b, p.id, p.seq+int64(i))
		b = append(b, `","payload":`...)
		b = appendPayload(b, p.id, p.seq+int64(i), kk, p.size)
		b = append(b, '}')
	}
	p.body = append(b, "]}"...)
	res, err := p.conn.push(p.body, n)
	full := p.spooled && isSpoolFull(err)
	row := p.led.rows[p.id]
	ok := 0
	for i := range n {
		st := uncertain
		switch {
		case full:
			st = refused
		case err != nil:
		case res[i].Status == "queued":
			st = queued
		case res[i].Status == "buffered" && p.spooled:
			st = buffered
			p.buffered++
		}
		if st == queued || st == buffered {
			ok++
		}
		row = append(row, st)
	}
	p.led.rows[p.id] = row
	p.seq += int64(n)
	p.led.queued.Add(int64(ok))
	switch {
	case full:
		p.refused += int64(n)
	case err != nil:
		p.errs.note(err)
	case ok < n:
		p.errs.items.Add(int64(n - ok))
		for _, r := range res {
			if r.Status != "queued" {
				p.errs.firstIs(fmt.Sprintf("push item answered status %q error %q", r.Status, r.Error))
				break
			}
		}
	}
	return ok
}

// queueOf is the queue of partition k.
func (p *producer) queueOf(k int) string {
	if len(p.queues) == 0 {
		return p.queue
	}
	return p.queues[k*len(p.queues)/len(p.parts)]
}

// RunPush measures pushes, then drains the queue (untimed) to check every message came back
// once, intact and in order.
func RunPush(ctx context.Context, t *Target, cfg PushConfig) (*Result, error) {
	c, err := t.client()
	if err != nil {
		return nil, err
	}
	queue := freshQueue("push")
	parts := partitionNames(cfg.Partitions)
	led := newLedger(cfg.Conns)
	var errs errorCounts
	ps := pushers{clients: []*client{c}, queues: []string{queue}, parts: parts, size: cfg.Size, batch: cfg.Batch, conns: cfg.Conns}
	r := ps.measure(ctx, t, newResult("push", cfg.label(), t, cfg), cfg.Warmup, cfg.Duration, led, &errs)

	g := newGroupLog("", parts, cfg.Size)
	drain(ctx, cfg.label(), c, queue, g, led.expected(), &errs)
	r.fail(g.check(led)...)
	r.setErrors(&errs)
	if led.expected() == 0 {
		r.fail("no message was pushed")
	}
	r.note("verified by draining %s messages with autoAck pops", count(g.count.Load()))
	return r.done(), nil
}

// pushers push batch messages per request as fast as the broker answers, each rotating over
// every partition: pusher i is ledger row firstID+i and talks to clients[i%len(clients)].
type pushers struct {
	clients []*client
	queues  []string // the partitions are spread over them, in order
	parts   []string
	size    int
	batch   int
	conns   int
	firstID int
}

// measure runs the pushers for warmup and duration and fills r's rates and latency.
func (ps pushers) measure(ctx context.Context, t *Target, r *Result, warmup, duration time.Duration, led *ledger, errs *errorCounts) *Result {
	var msgs, reqs atomic.Int64
	lats := make([]latencies, ps.conns)
	w := startWindow(ctx, t, warmup, duration)
	stopProgress := startProgress(r.Label, w, func() string {
		return fmt.Sprintf("queued %s  errors %d", count(led.expected()), errs.total())
	})
	var wg sync.WaitGroup
	for i := range ps.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := newProducer(ps.firstID+i, ps.clients[i%len(ps.clients)], ps.queues[0], ps.parts, ps.size, led, errs)
			p.queues = ps.queues
			for n := 0; !w.over(); n++ {
				sent := now()
				ok := p.push((i+n)%len(ps.parts), ps.batch)
				if done := now(); w.in(done) {
					lats[i] = append(lats[i], done-sent)
					msgs.Add(int64(ok))
					reqs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	stopProgress()
	w.finish(r)
	r.setRates(msgs.Load(), reqs.Load())
	r.Latency = percentiles(lats...)
	return r
}

// drain pops (autoAck, untimed) what is left in the queue for one group until the group has
// received expect messages and the queue answers empty, or nothing arrives for drainIdle.
func drain(ctx context.Context, label string, c *client, queue string, g *groupLog, expect int64, errs *errorCounts) {
	drainPops(ctx, label, c, popParams{queue: queue, group: g.group, batch: 1000, autoAck: true}, g, expect, errs)
}

// drainPops is drain with the pop's parameters given: its queue, group and partitions.
func drainPops(ctx context.Context, label string, c *client, pop popParams, g *groupLog, expect int64, errs *errorCounts) {
	path := pop.path()
	drainQueue(ctx, label, g.name, c, path, expect, g.count.Load,
		func(msgs []popMsg, sent, recv time.Duration) { g.record(msgs, sent, recv) }, errs)
}

// drainQueue pops path (autoAck, untimed) from a few connections and hands each batch to got,
// until have() reaches expect and the queue answers empty, or nothing arrives for drainIdle.
func drainQueue[M any](ctx context.Context, label, name string, c *client, path string, expect int64,
	have func() int64, got func(msgs []M, sent, recv time.Duration), errs *errorCounts) {
	const drainers, drainIdle = 4, 5 * time.Second
	stopProgress := startProgress(label, nil, func() string {
		return fmt.Sprintf("verifying: %s drained %s of %s", name, count(have()), count(expect))
	})
	defer stopProgress()
	var lastProgress atomic.Int64
	lastProgress.Store(int64(now()))
	var wg sync.WaitGroup
	for range drainers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cn := c.conn()
			for ctx.Err() == nil {
				sent := now()
				msgs, err := popAs[M](cn, path)
				if err != nil {
					errs.note(err)
					time.Sleep(50 * time.Millisecond)
				}
				if len(msgs) > 0 {
					got(msgs, sent, now())
					lastProgress.Store(int64(now()))
					continue
				}
				// Empty: done once everything came back (an answer after that would be a
				// duplicate, which is why the queue must also answer empty), else wait a little
				// for a slow broker.
				if have() >= expect || now()-time.Duration(lastProgress.Load()) > drainIdle {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
}

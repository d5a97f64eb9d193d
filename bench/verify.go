package main

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Every message the bench pushes identifies itself: its payload carries the producer, the
// producer's sequence number and the partition index, padded to the requested size with bytes
// derived from (producer, sequence), and its transactionId is derived from the same pair. A
// consumer can so check that what it got is what was pushed, intact, once, in order.

// payload is the bench's message body.
type payload struct {
	P int    `json:"p"` // producer
	S int64  `json:"s"` // the producer's sequence number, from 0
	K int    `json:"k"` // partition index
	R string `json:"r"` // padding
}

// clock0 is the time base of every timestamp the verifier compares, across all phases.
var clock0 = time.Now()

func now() time.Duration { return time.Since(clock0) }

func digits(n int64) int { return len(strconv.AppendInt(nil, n, 10)) }

// padLen is the padding that makes the payload of (p, s, k) size bytes long.
func padLen(p int, s int64, k, size int) int {
	fixed := len(`{"p":,"s":,"k":,"r":""}`) + digits(int64(p)) + digits(s) + digits(int64(k))
	return max(0, size-fixed)
}

// padSeed starts the padding generator of (p, s); never zero, as xorshift needs.
func padSeed(p int, s int64) uint64 {
	x := uint64(p)<<40 ^ uint64(s) ^ 0x9e3779b97f4a7c15
	return x | 1
}

const padAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

func nextPad(x uint64) uint64 {
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	return x
}

func appendPayload(dst []byte, p int, s int64, k, size int) []byte {
	dst = append(dst, `{"p":`...)
	dst = strconv.AppendInt(dst, int64(p), 10)
	dst = append(dst, `,"s":`...)
	dst = strconv.AppendInt(dst, s, 10)
	dst = append(dst, `,"k":`...)
	dst = strconv.AppendInt(dst, int64(k), 10)
	dst = append(dst, `,"r":"`...)
	x := padSeed(p, s)
	for range padLen(p, s, k, size) {
		x = nextPad(x)
		dst = append(dst, padAlphabet[x%uint64(len(padAlphabet))])
	}
	return append(dst, `"}`...)
}

func padOK(r string, p int, s int64, k, size int) bool {
	if len(r) != padLen(p, s, k, size) {
		return false
	}
	x := padSeed(p, s)
	for i := 0; i < len(r); i++ {
		x = nextPad(x)
		if r[i] != padAlphabet[x%uint64(len(padAlphabet))] {
			return false
		}
	}
	return true
}

// appendTxID appends the transactionId of (p, s): UUID-shaped, so the broker stores and indexes
// an id as long as the ones real clients send (UUIDv7).
func appendTxID(dst []byte, p int, s int64) []byte {
	dst = appendHex(dst, uint64(p), 8)
	dst = append(dst, "-b0b0-7000-8000-"...)
	return appendHex(dst, uint64(s), 12)
}

func appendHex(dst []byte, v uint64, width int) []byte {
	const hex = "0123456789abcdef"
	for i := width - 1; i >= 0; i-- {
		dst = append(dst, hex[(v>>(4*uint(i)))&15])
	}
	return dst
}

func partitionNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "p" + strconv.Itoa(i)
	}
	return out
}

// What a producer knows about each message it pushed.
const (
	notPushed uint8 = iota
	queued          // answered "queued"
	buffered        // answered "buffered" (in the disk spool), where the scenario expects it
	refused         // answered 503 spool_full: not stored
	uncertain       // the request failed or the item was not answered as expected: stored 0 or 1 times
)

// ledger is what every producer pushed, indexed [producer][sequence]. Each producer appends to
// its own row only, so producers need no lock; the rows are read once the producers are done.
type ledger struct {
	rows   [][]uint8
	queued atomic.Int64 // answered queued or buffered
}

func newLedger(producers int) *ledger { return &ledger{rows: make([][]uint8, producers)} }

// expected is the number of messages answered "queued" (or "buffered"), all of which must be
// delivered.
func (l *ledger) expected() int64 { return l.queued.Load() }

// span is the run of one (partition, producer) inside one delivered batch.
type span struct {
	lo, hi     int64         // first and last sequence number
	sent, recv time.Duration // when the pop was sent and answered
}

type spanKey struct{ k, p int }

// groupLog is what one consumer group (or queue mode) received.
type groupLog struct {
	group      string // the consumerGroup sent to the broker, "" for queue mode
	name       string // for messages
	partitions []string
	size       int

	count atomic.Int64 // messages received, for progress and lag

	mu       sync.Mutex
	got      [][]uint8 // [producer][sequence] times received (saturating)
	spans    map[spanKey][]span
	corrupt  int
	disorder int // out of order within one batch
	examples []string
}

func newGroupLog(group string, partitions []string, size int) *groupLog {
	return &groupLog{group: group, name: displayGroup(group), partitions: partitions, size: size, spans: map[spanKey][]span{}}
}

func (g *groupLog) example(format string, args ...any) {
	if len(g.examples) < 8 {
		g.examples = append(g.examples, fmt.Sprintf(format, args...))
	}
}

// record checks and files one delivered batch; sent and recv bracket the pop that brought it.
// It returns the group's count after the batch.
func (g *groupLog) record(msgs []popMsg, sent, recv time.Duration) int64 {
	var tx []byte
	g.mu.Lock()
	defer g.mu.Unlock()
	// Runs of one (partition, producer) in this batch, in delivery order.
	var runs map[spanKey]*span
	for i := range msgs {
		m := &msgs[i]
		d := m.Data
		if d.P < 0 || d.P > 1<<20 || d.S < 0 || d.K < 0 || d.K >= len(g.partitions) {
			g.corrupt++
			g.example("%s: message %s has a payload the bench did not push (p=%d s=%d k=%d)", g.name, m.TransactionID, d.P, d.S, d.K)
			continue
		}
		tx = appendTxID(tx[:0], d.P, d.S)
		switch {
		case m.Partition != g.partitions[d.K]:
			g.corrupt++
			g.example("%s: producer %d message %d pushed to partition %s was delivered from partition %q", g.name, d.P, d.S, g.partitions[d.K], m.Partition)
		case m.TransactionID != string(tx):
			g.corrupt++
			g.example("%s: producer %d message %d has transactionId %q, want %q", g.name, d.P, d.S, m.TransactionID, tx)
		case !padOK(d.R, d.P, d.S, d.K, g.size):
			g.corrupt++
			g.example("%s: producer %d message %d has a damaged payload (%d padding bytes)", g.name, d.P, d.S, len(d.R))
		}
		for len(g.got) <= d.P {
			g.got = append(g.got, nil)
		}
		row := g.got[d.P]
		if int64(len(row)) <= d.S {
			row = slices.Grow(row, int(d.S)+1-len(row))[:d.S+1]
			g.got[d.P] = row
		}
		if row[d.S] < 255 {
			row[d.S]++
		}
		key := spanKey{d.K, d.P}
		if runs == nil {
			runs = map[spanKey]*span{}
		}
		if r := runs[key]; r != nil {
			if d.S <= r.hi {
				g.disorder++
				g.example("%s: partition %s producer %d: message %d delivered after %d in the same batch", g.name, g.partitions[d.K], d.P, d.S, r.hi)
			}
			r.lo, r.hi = min(r.lo, d.S), max(r.hi, d.S)
		} else {
			runs[key] = &span{lo: d.S, hi: d.S, sent: sent, recv: recv}
		}
	}
	for k, r := range runs {
		g.spans[k] = append(g.spans[k], *r)
	}
	return g.count.Add(int64(len(msgs)))
}

// check compares what the group received with what the producers pushed and returns one line
// per kind of failure; none means every message came back exactly once, intact, in order.
func (g *groupLog) check(l *ledger) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var fails []string
	var missing, dup, unexpected, stored int64
	var exMissing, exDup, exUnexpected, exStored string
	for p := 0; p < max(len(l.rows), len(g.got)); p++ {
		var pushed, got []uint8
		if p < len(l.rows) {
			pushed = l.rows[p]
		}
		if p < len(g.got) {
			got = g.got[p]
		}
		for s := 0; s < max(len(pushed), len(got)); s++ {
			st, n := notPushed, uint8(0)
			if s < len(pushed) {
				st = pushed[s]
			}
			if s < len(got) {
				n = got[s]
			}
			switch {
			case (st == queued || st == buffered) && n == 0:
				missing++
				if exMissing == "" {
					exMissing = fmt.Sprintf(" (first: producer %d message %d)", p, s)
				}
			case st == refused && n > 0:
				stored++
				if exStored == "" {
					exStored = fmt.Sprintf(" (first: producer %d message %d)", p, s)
				}
			case n > 1:
				dup++
				if exDup == "" {
					exDup = fmt.Sprintf(" (first: producer %d message %d, %d times)", p, s, n)
				}
			case st == notPushed && n > 0:
				unexpected++
				if exUnexpected == "" {
					exUnexpected = fmt.Sprintf(" (first: producer %d message %d)", p, s)
				}
			}
		}
	}
	if missing > 0 {
		fails = append(fails, fmt.Sprintf("%s: %d messages answered queued or buffered were never delivered%s", g.name, missing, exMissing))
	}
	if stored > 0 {
		fails = append(fails, fmt.Sprintf("%s: %d messages answered spool full (not stored) were delivered%s", g.name, stored, exStored))
	}
	if dup > 0 {
		fails = append(fails, fmt.Sprintf("%s: %d messages were delivered more than once%s", g.name, dup, exDup))
	}
	if unexpected > 0 {
		fails = append(fails, fmt.Sprintf("%s: %d messages were delivered that no push stored%s", g.name, unexpected, exUnexpected))
	}
	if g.corrupt > 0 {
		fails = append(fails, fmt.Sprintf("%s: %d messages arrived damaged or misrouted", g.name, g.corrupt))
	}
	if g.disorder > 0 {
		fails = append(fails, fmt.Sprintf("%s: %d messages out of order inside a batch", g.name, g.disorder))
	}
	if n, ex := g.orderViolations(); n > 0 {
		fails = append(fails, fmt.Sprintf("%s: %d batches out of push order%s", g.name, n, ex))
	}
	if len(fails) > 0 {
		fails = append(fails, g.examples...)
	}
	return fails
}

// orderViolations checks the order across batches, per (partition, producer). Concurrent
// consumers receive batches of one partition in an order the bench cannot observe directly (with
// autoAck, the next batch can be answered to another consumer before the first one's answer is
// read), so it checks what is observable: sorted by sequence number, the batches of a
// (partition, producer) must not interleave, and no batch may hold earlier messages than one
// that was already answered before it was even requested.
func (g *groupLog) orderViolations() (int, string) {
	bad := 0
	ex := ""
	for key, spans := range g.spans {
		slices.SortFunc(spans, func(a, b span) int { return int(a.lo - b.lo) })
		var latestSent time.Duration
		for i, sp := range spans {
			if i > 0 && spans[i-1].hi >= sp.lo {
				bad++
				if ex == "" {
					ex = fmt.Sprintf(" (partition %s producer %d: batches %d..%d and %d..%d interleave)",
						g.partitions[key.k], key.p, spans[i-1].lo, spans[i-1].hi, sp.lo, sp.hi)
				}
			}
			if i > 0 && latestSent > sp.recv {
				bad++
				if ex == "" {
					ex = fmt.Sprintf(" (partition %s producer %d: messages %d..%d were delivered before earlier ones)",
						g.partitions[key.k], key.p, sp.lo, sp.hi)
				}
			}
			latestSent = max(latestSent, sp.sent)
		}
	}
	return bad, ex
}

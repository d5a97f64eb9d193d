// Package writer is the one way messages enter the broker and cursors move back. Every route
// that stores messages (push, transaction, stream cycle, dead-letter replay) or rewinds a
// consumer group (seek) calls it; the HTTP handlers only decode, call and encode. A write is
// sealed (payloads of encrypted queues), stored (through the queue actors, which spool when
// PostgreSQL cannot take it, or in one PostgreSQL transaction), counted, and announced: parked
// pops of the queue wake here and on the peers.
package writer

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"queen/actors"
	"queen/persistence"
	"queen/seal"
	"queen/spool"
	"queen/telemetry"
)

// Deps is what a Writer uses.
type Deps struct {
	Store       *persistence.Store
	Actors      *actors.System
	Maintenance *actors.Maintenance
	Telemetry   *telemetry.Broker
	// Wake wakes the parked pops of queue, on these partitions or all of them (nil), here and
	// on the peers.
	Wake func(queue persistence.QueueName, partitions []string)
	// PayloadKey seals and opens payloads; nil without QUEEN_ENCRYPTION_KEY.
	PayloadKey *seal.Key
	// EncryptedQueues says which queues are configured with encryptionEnabled.
	EncryptedQueues *EncryptedQueues
	// PushDeadline bounds the wait for the queue actors' answer to a push. They answer from
	// the spool when PostgreSQL is slow, so it only guards against a stuck spool.
	PushDeadline time.Duration
	Log          *slog.Logger
}

// Writer stores messages; see the package comment.
type Writer struct{ Deps }

// New returns a Writer.
func New(d Deps) *Writer { return &Writer{d} }

// ErrSpoolFull refuses a push the disk spool had no room for (FILE_BUFFER_MAX_BYTES reached, or
// the disk full) while it could not go to PostgreSQL: nothing of it was stored, and the client
// should retry later. Its text is the answer's error.
var ErrSpoolFull = errors.New("the disk spool is full: the push was not stored; retry later")

// ErrNoAnswer is a push the queue actors did not answer within PushDeadline.
var ErrNoAnswer = errors.New("deadline exceeded waiting for the database")

// EncryptionRequired refuses a write to an encrypted queue when the broker has no key: storing
// the payload in clear is exactly what the flag forbids, and retrying cannot help.
type EncryptionRequired struct{ Queue persistence.QueueName }

func (e *EncryptionRequired) Error() string { return persistence.EncryptionRequired(e.Queue) }

// seal seals, in place, the payloads of items bound for encrypted queues. Without a key it
// refuses the whole write if any item needs sealing, before anything is stored. The push
// transaction itself seals whatever a stale flag cache let through (persistence.sealForQueue).
func (w *Writer) seal(items []*persistence.PushItem) error {
	if w.EncryptedQueues == nil || w.EncryptedQueues.Count() == 0 {
		return nil
	}
	for _, it := range items {
		if it.Encrypted || !w.EncryptedQueues.Encrypted(it.Queue) {
			continue
		}
		if w.PayloadKey == nil {
			return &EncryptionRequired{it.Queue}
		}
		// it.TransactionID is set (decode draws one when the client gives none): the envelope
		// is bound to this message, by the queue's stored name.
		env, err := w.PayloadKey.Seal(it.Payload, it.Queue.Stored(), it.TransactionID)
		if err != nil {
			return err
		}
		it.Payload, it.Encrypted = env, true
	}
	return nil
}

// sealAll seals the items of a slice in place.
func (w *Writer) sealAll(items []persistence.PushItem) error {
	ptrs := make([]*persistence.PushItem, len(items))
	for i := range items {
		ptrs[i] = &items[i]
	}
	return w.seal(ptrs)
}

// Outcome of one pushed item.
type Outcome struct {
	persistence.PushResult
	// Buffered says the item went to the disk spool rather than PostgreSQL: its Result is
	// empty, and it is stored when the spool drains.
	Buffered bool
}

// PushResult is what became of a push.
type PushResult struct {
	Items []Outcome // in the order of the items
	// Buffered: some items went to the disk spool. SpoolFailed: under push maintenance the
	// spool refused some items, which are failed.
	Buffered, SpoolFailed bool
}

// Push stores items (queues and producer set) through their queue actors: to PostgreSQL, or to
// the disk spool under push maintenance or when PostgreSQL cannot take them in time. The items
// of one queue are stored together; the queues, one after the other in their own actors. The
// actors may read items after Push returns (when no answer came in time): the caller must not
// change them.
func (w *Writer) Push(items []persistence.PushItem) (PushResult, error) {
	out := PushResult{Items: make([]Outcome, len(items))}
	if err := w.sealAll(items); err != nil {
		return out, err
	}
	type slot struct {
		idx   []int
		items []persistence.PushItem
		reply chan actors.PushReply
	}
	byQueue := map[persistence.QueueName]*slot{}
	var order []persistence.QueueName
	for i, it := range items {
		sl := byQueue[it.Queue]
		if sl == nil {
			sl = &slot{reply: make(chan actors.PushReply, 1)}
			byQueue[it.Queue] = sl
			order = append(order, it.Queue)
		}
		sl.idx = append(sl.idx, i)
	}
	for _, q := range order {
		sl := byQueue[q]
		if len(order) == 1 {
			sl.items = items // the common push, to one queue: the actor takes the caller's items
			continue
		}
		sl.items = make([]persistence.PushItem, len(sl.idx))
		for k, i := range sl.idx {
			sl.items[k] = items[i]
		}
	}
	for _, q := range order {
		w.Actors.Push(&actors.PushRequest{Queue: q, Items: byQueue[q].items, Reply: byQueue[q].reply})
	}
	deadline := time.NewTimer(w.PushDeadline)
	defer deadline.Stop()
	for _, q := range order {
		sl := byQueue[q]
		var rep actors.PushReply
		select {
		case rep = <-sl.reply:
		case <-deadline.C:
			return out, ErrNoAnswer
		}
		switch {
		case rep.Buffered:
			out.Buffered = true
			w.Telemetry.Pushed(q, len(sl.idx))
			for _, i := range sl.idx {
				out.Items[i].Buffered = true
			}
			continue
		case errors.Is(rep.Err, spool.ErrFull):
			// Counted here, logged by the spool (once per interval, not once per push).
			w.Telemetry.Set.GetOrCreateCounter("queen_spool_full_refused_messages_total").Add(len(sl.idx))
			return out, ErrSpoolFull
		case rep.Err != nil && rep.Results == nil && w.Maintenance.Push():
			// Push maintenance and the spool refused the write.
			w.Log.Error("cannot spool a push", "queue", q.String(), "err", rep.Err)
			out.SpoolFailed = true
			for _, i := range sl.idx {
				out.Items[i].Status, out.Items[i].Error = persistence.StatusFailed, "File buffer write failed"
			}
			continue
		case rep.Err != nil:
			return out, rep.Err
		}
		stored := 0
		for k, r := range rep.Results {
			out.Items[sl.idx[k]].PushResult = r
			if r.Status == persistence.StatusQueued {
				stored++
			}
		}
		w.Telemetry.Pushed(q, stored)
	}
	return out, nil
}

// Transaction applies ops atomically (persistence.Store.Transaction); committed, its acks and
// messages are counted and the pops parked on its partitions are woken (the reference relied
// on its poll interval for transactional pushes).
func (w *Writer) Transaction(ctx context.Context, ops []persistence.TxOp) ([]persistence.TxOpResult, string, error) {
	for i := range ops {
		if err := w.sealAll(ops[i].Push); err != nil {
			return nil, "", err
		}
	}
	results, reason, err := w.Store.Transaction(ctx, ops)
	if err != nil || reason != "" {
		return results, reason, err
	}
	w.countTransaction(ops, results)
	for _, op := range ops {
		w.wakePushed(op.Push)
	}
	return results, "", nil
}

// Cycle commits a stream cycle (persistence.Store.Cycle); committed, it is counted as the
// transaction it is, and the pops parked on its sink partitions are woken.
func (w *Writer) Cycle(ctx context.Context, c persistence.StreamCycle) (persistence.CycleResult, string, error) {
	if err := w.sealAll(c.Push); err != nil {
		return persistence.CycleResult{}, "", err
	}
	res, reason, err := w.Store.Cycle(ctx, c)
	if err != nil || reason != "" {
		return res, reason, err
	}
	ops := []persistence.TxOp{{Push: c.Push}}
	results := []persistence.TxOpResult{{Push: res.Push}}
	if res.Ack != nil {
		ops = append(ops, persistence.TxOp{Ack: c.Ack})
		results = append(results, persistence.TxOpResult{Ack: res.Ack})
	}
	w.countTransaction(ops, results)
	w.wakePushed(c.Push)
	return res, "", nil
}

// ReplayDeadLetter pushes a copy of a dead letter back into its partition
// (persistence.Store.ReplayDeadLetter), counts it and wakes the partition's parked pops.
func (w *Writer) ReplayDeadLetter(ctx context.Context, scope persistence.Scope, partition uuid.UUID, transactionID string) (persistence.DeadLetterReplay, error) {
	var open persistence.PayloadOpener
	if w.PayloadKey != nil {
		open = w.PayloadKey
	}
	r, err := w.Store.ReplayDeadLetter(ctx, scope, partition, transactionID, open)
	if err != nil || !r.Found {
		return r, err
	}
	if r.Result.Status == persistence.StatusQueued {
		w.Telemetry.Pushed(r.Queue, 1)
	}
	w.Wake(r.Queue, []string{r.Partition})
	return r, nil
}

// SeekQueue moves group's cursors on queue (persistence.Store.SeekQueue); a cursor moved back
// makes messages available again, so the queue's parked pops are woken.
func (w *Writer) SeekQueue(ctx context.Context, group string, queue persistence.QueueName, to *time.Time) (int64, error) {
	n, err := w.Store.SeekQueue(ctx, group, queue, to)
	if err == nil {
		w.Wake(queue, nil)
	}
	return n, err
}

// DeleteConsumerGroup deletes group's cursors (persistence.Store.DeleteConsumerGroup): the
// group reads its history again, so the pops parked on the queues it had cursors on are woken.
func (w *Writer) DeleteConsumerGroup(ctx context.Context, scope persistence.Scope, group string, queue persistence.QueueName, deleteMetadata bool) (persistence.DeletedGroup, error) {
	d, err := w.Store.DeleteConsumerGroup(ctx, scope, group, queue, deleteMetadata)
	if err != nil {
		return d, err
	}
	for _, q := range d.Queues {
		w.Wake(q, nil)
	}
	return d, nil
}

// wakePushed wakes the pops parked on the partitions items went to.
func (w *Writer) wakePushed(items []persistence.PushItem) {
	for _, it := range items {
		w.Wake(it.Queue, []string{it.Partition})
	}
}

// countTransaction counts the acknowledgements a committed transaction applied, and for each
// queue it touched the transaction and the messages it stored there.
func (w *Writer) countTransaction(ops []persistence.TxOp, results []persistence.TxOpResult) {
	var queues []persistence.QueueName // in the order the transaction touched them
	stored := map[persistence.QueueName]int{}
	touch := func(q persistence.QueueName, n int) {
		if _, ok := stored[q]; !ok {
			queues = append(queues, q)
		}
		stored[q] += n
	}
	for i, r := range results {
		if r.Ack != nil && r.Ack.Success {
			w.Telemetry.Acked(r.Ack.Queue, ops[i].Ack.Status != persistence.AckCompleted, r.Ack.DLQ)
			touch(r.Ack.Queue, 0)
		}
		for j, p := range r.Push {
			n := 0
			if p.Status == persistence.StatusQueued {
				n = 1
			}
			touch(ops[i].Push[j].Queue, n)
		}
	}
	for _, q := range queues {
		w.Telemetry.Transacted(q, stored[q])
	}
}

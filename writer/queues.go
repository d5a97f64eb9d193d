package writer

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"queen/background"
	"queen/persistence"
)

// EncryptedQueues knows which queues are configured with encryptionEnabled, so that a push learns whether
// to seal without a database round trip: the push must seal before its payload reaches the disk
// spool, where PostgreSQL may not be reachable at all.
//
// It holds the whole set (flagged queues are few) and is kept current three ways: Set when this
// broker configures or deletes a queue, Kick when a peer announces a change on the mesh, and a
// periodic reload as the floor under a lost announcement. The database stays the authority: the
// push transaction re-checks the flag and seals what a stale cache let through in clear.
type EncryptedQueues struct {
	load func(context.Context) ([]persistence.QueueName, error)
	log  *slog.Logger
	kick chan struct{}

	mu  sync.RWMutex
	on  map[persistence.QueueName]bool
	gen uint64 // bumped by Set, so a reload that read before a local change does not undo it
}

// NewEncryptedQueues makes an empty set; load reads the names of the flagged queues from the database.
func NewEncryptedQueues(load func(context.Context) ([]persistence.QueueName, error), log *slog.Logger) *EncryptedQueues {
	if log == nil {
		log = slog.Default()
	}
	return &EncryptedQueues{load: load, log: log, kick: make(chan struct{}, 1), on: map[persistence.QueueName]bool{}}
}

// Encrypted reports whether queue is flagged encryptionEnabled.
func (q *EncryptedQueues) Encrypted(queue persistence.QueueName) bool {
	q.mu.RLock()
	defer q.mu.RUnlock()
	return q.on[queue]
}

// Count is the number of flagged queues.
func (q *EncryptedQueues) Count() int {
	q.mu.RLock()
	defer q.mu.RUnlock()
	return len(q.on)
}

// Names lists the flagged queues, by tenant then name.
func (q *EncryptedQueues) Names() []persistence.QueueName {
	q.mu.RLock()
	defer q.mu.RUnlock()
	names := make([]persistence.QueueName, 0, len(q.on))
	for n := range q.on {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b persistence.QueueName) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Name, b.Name))
	})
	return names
}

// Set records a change made by this broker (configure, delete).
func (q *EncryptedQueues) Set(queue persistence.QueueName, encrypted bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.gen++
	if encrypted {
		q.on[queue] = true
	} else {
		delete(q.on, queue)
	}
}

// Reload replaces the set with the database's. It reports false, changing nothing, when a
// local Set happened while it read: what it read may predate that change.
func (q *EncryptedQueues) Reload(ctx context.Context) (bool, error) {
	q.mu.RLock()
	gen := q.gen
	q.mu.RUnlock()
	names, err := q.load(ctx)
	if err != nil {
		return false, err
	}
	on := make(map[persistence.QueueName]bool, len(names))
	for _, n := range names {
		on[n] = true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.gen != gen {
		return false, nil
	}
	q.on = on
	return true, nil
}

// Kick asks the Start loop for a reload soon (a peer changed a queue's configuration).
func (q *EncryptedQueues) Kick() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// Start keeps the set current in g: a reload every interval (10 s when 0) and on each Kick.
func (q *EncryptedQueues) Start(g *background.Group, every time.Duration) {
	if every <= 0 {
		every = 10 * time.Second
	}
	g.Every(every, q.kick, q.refresh)
}

// refresh reloads once, keeping the set in memory when the database cannot answer.
func (q *EncryptedQueues) refresh(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	fresh, err := q.Reload(rctx)
	cancel()
	switch {
	case err != nil && ctx.Err() == nil:
		q.log.Debug("cannot re-read the encrypted queues; keeping the ones in memory", "err", err)
	case err == nil && !fresh:
		q.Kick() // raced with a local change: read again
	}
}

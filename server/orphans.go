package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"queen/background"
	"queen/persistence"
)

// orphanLeases releases the leases of pops that failed (their client got an error) in case the
// database committed the claim after all: such a lease would otherwise hold its partition for
// nobody until it expires. Until PostgreSQL answers, the ids wait.
type orphanLeases struct {
	log   *slog.Logger
	store *persistence.Store
	ids   chan uuid.UUID
	every time.Duration
	loop  *background.Group
}

func newOrphanLeases(log *slog.Logger, store *persistence.Store, every time.Duration) *orphanLeases {
	return &orphanLeases{log: log, store: store, ids: make(chan uuid.UUID, 4096), every: every}
}

// add queues a lease for release; it is actors.Deps.OrphanLease.
func (o *orphanLeases) add(id uuid.UUID) {
	select {
	case o.ids <- id:
	default: // thousands pending: the rest expire on their own
	}
}

func (o *orphanLeases) start() {
	o.loop = background.NewGroup()
	o.loop.Every(o.every, nil, o.release)
}

func (o *orphanLeases) stop() { o.loop.Stop() }

// release frees the queued leases; those PostgreSQL does not take go back in the queue.
func (o *orphanLeases) release(ctx context.Context) {
	var ids []uuid.UUID
collect:
	for len(ids) < cap(o.ids) {
		select {
		case id := <-o.ids:
			ids = append(ids, id)
		default:
			break collect
		}
	}
	if len(ids) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	n, err := o.store.ReleaseLeases(rctx, ids)
	if err != nil {
		for _, id := range ids {
			o.add(id)
		}
		return
	}
	if n > 0 {
		o.log.Info("released leases of pops that failed while the database was away", "partitions", n)
	}
}

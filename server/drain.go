package server

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"queen/actors"
	"queen/background"
	"queen/config"
	"queen/persistence"
	"queen/spool"
)

// drain replays the disk spool into PostgreSQL every FILE_BUFFER_FLUSH_MS, and at once when push
// maintenance ends. It owns the database health the queue actors read: they mark PostgreSQL
// unreachable when a push cannot reach it, and only a drain that gets through marks it back.
type drain struct {
	log      *slog.Logger
	store    *persistence.Store
	spool    *spool.Spool
	flags    *actors.Maintenance
	healthy  *atomic.Bool
	notify   func(queue persistence.QueueName, partitions []string) // wakes parked pops here and on the peers
	every    time.Duration
	maxBatch int
	dir      string
	kick     chan struct{}
	loop     *background.Group
}

// errDrainPaused stops a drain when push maintenance is turned on in its middle.
var errDrainPaused = errors.New("push maintenance turned on")

func newDrain(cfg config.Config, log *slog.Logger, store *persistence.Store, sp *spool.Spool, flags *actors.Maintenance,
	healthy *atomic.Bool, notify func(persistence.QueueName, []string)) *drain {
	return &drain{log: log, store: store, spool: sp, flags: flags, healthy: healthy, notify: notify,
		every: cfg.SpoolFlush, maxBatch: cfg.SpoolMaxBatch, dir: cfg.SpoolDir, kick: make(chan struct{}, 1)}
}

func (d *drain) start() {
	d.loop = background.NewGroup()
	d.loop.Every(d.every, d.kick, d.once)
}

func (d *drain) stop() {
	d.loop.Stop()
	if st := d.spool.Stats(); st.Records > 0 {
		d.log.Warn("spool has undrained records at shutdown; they are replayed at the next start",
			"records", st.Records, "dir", d.dir)
	}
}

// resume runs a drain at once (push maintenance turned off).
func (d *drain) resume() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// once replays the spool unless push maintenance is on. A failure that says PostgreSQL is
// unreachable stops the round and marks it unhealthy; pushes keep going to the spool until a
// later round gets through. The active segment is sealed only when the drain can proceed
// (ready): sealing it on every tick of an outage left one small file per tick.
func (d *drain) once(ctx context.Context) {
	if d.flags.Push() {
		return
	}
	if d.spool.Empty() {
		if !d.healthy.Load() && d.ready(ctx) == nil {
			d.setHealthy(true, nil)
		}
		return
	}
	// Pushes keep arriving in the spool while it drains (none may overtake a spooled one), so
	// the drain goes round again at once until it finds the spool empty; the spool paces those
	// pushes so that the backlog shrinks (spool.Options.PaceWait).
	n, err := 0, error(nil)
	start := time.Now()
	before := d.spool.Stats()
	for {
		var k int
		k, err = d.spool.DrainWhenReady(ctx, d.maxBatch, d.ready, func(batch [][]byte) (map[int]string, error) {
			if d.flags.Push() {
				return nil, errDrainPaused
			}
			stored, refused, err := d.store.Replay(ctx, batch)
			for q, parts := range stored {
				d.notify(q, parts)
			}
			return refused, err
		})
		n += k
		if err != nil || k == 0 || d.spool.Empty() {
			break
		}
	}
	if n > 0 {
		after := d.spool.Stats()
		d.log.Info("spool drained into PostgreSQL", "records", n, "pending", after.Records,
			"seconds", round1(time.Since(start).Seconds()), "paced_pushes", after.PacedAppends-before.PacedAppends,
			"paced_wait_s", round1((after.PacedWait - before.PacedWait).Seconds()))
	}
	switch {
	case err == nil:
		d.setHealthy(true, nil)
	case ctx.Err() != nil || errors.Is(err, errDrainPaused):
	case persistence.IsUnavailable(err):
		d.setHealthy(false, err)
	default:
		d.log.Error("cannot drain the spool", "err", err)
	}
}

// ready says whether a drain can proceed: push maintenance off, and PostgreSQL reachable
// (asked again when the last attempt found it away).
func (d *drain) ready(ctx context.Context) error {
	if d.flags.Push() {
		return errDrainPaused
	}
	if d.healthy.Load() {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return d.store.Ping(pctx)
}

func (d *drain) setHealthy(ok bool, err error) {
	if d.healthy.Swap(ok) == ok {
		return
	}
	if ok {
		d.log.Info("PostgreSQL is back: pushes go to it again once the spool is drained")
	} else {
		d.log.Warn("spool drain paused: PostgreSQL unreachable", "err", err)
	}
}

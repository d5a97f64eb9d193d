package server

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"queen/actors"
	"queen/config"
	"queen/mesh"
	"queen/persistence"
	"queen/seal"
	"queen/spool"
)

// control is the operations side of a broker: the maintenance flags (in memory, in
// queen.system_state, on the mesh), the disk spool and its drain, and the mesh itself. It
// implements http.Control and mesh.Handler.
type control struct {
	cfg       config.Config
	log       *slog.Logger
	store     *persistence.Store
	actors    *actors.System
	maint     *actors.Maintenance
	spool     *spool.Spool
	mesh      *mesh.Mesh // nil without peers
	dbHealthy atomic.Bool
	kick      chan struct{} // wakes the drain loop at once (maintenance turned off)
	// flips counts flag changes made here or announced by a peer, so a re-read from the
	// database that started before one does not undo it.
	flips atomic.Uint64
	// orphans holds leases of failed pops, released once PostgreSQL answers (orphanedLeases).
	orphans chan uuid.UUID
	// encrypted caches which queues are flagged encryptionEnabled; a peer's change reloads it.
	encrypted *seal.Queues
	cancel    context.CancelFunc
	done      chan struct{}
}

// errDrainPaused stops a drain when push maintenance is turned on in its middle.
var errDrainPaused = errors.New("push maintenance turned on")

func newControl(cfg config.Config, log *slog.Logger, store *persistence.Store, sp *spool.Spool) *control {
	c := &control{cfg: cfg, log: log, store: store, maint: &actors.Maintenance{}, spool: sp,
		kick: make(chan struct{}, 1), orphans: make(chan uuid.UUID, 4096)}
	c.dbHealthy.Store(true)
	return c
}

// start runs the drain and flag-refresh loop.
func (c *control) start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.done = cancel, make(chan struct{})
	go c.loop(ctx)
}

func (c *control) stop() {
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
	if st := c.spool.Stats(); st.Records > 0 {
		c.log.Warn("spool has undrained records at shutdown; they are replayed at the next start",
			"records", st.Records, "dir", c.cfg.SpoolDir)
	}
}

func (c *control) loop(ctx context.Context) {
	defer close(c.done)
	drain := time.NewTicker(c.cfg.SpoolFlush)
	defer drain.Stop()
	refresh := time.NewTicker(c.cfg.FlagsRefresh)
	defer refresh.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-drain.C:
			c.drainOnce(ctx)
			c.releaseOrphans(ctx)
		case <-c.kick:
			c.drainOnce(ctx)
		case <-refresh.C:
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			c.RefreshFlags(rctx)
			cancel()
		}
	}
}

// drainOnce replays the spool into PostgreSQL unless push maintenance is on. A failure that
// says PostgreSQL is unreachable stops the round and marks it unhealthy; pushes keep going to
// the spool until a later round gets through. The active segment is sealed only when the drain
// can proceed (drainReady): sealing it on every tick of an outage left one small file per tick.
func (c *control) drainOnce(ctx context.Context) {
	if c.maint.Push() {
		return
	}
	if c.spool.Empty() {
		if !c.dbHealthy.Load() && c.drainReady(ctx) == nil {
			c.setHealthy(true, nil)
		}
		return
	}
	n, err := c.spool.DrainWhenReady(ctx, c.cfg.SpoolMaxBatch, c.drainReady, func(batch [][]byte) (map[int]string, error) {
		if c.maint.Push() {
			return nil, errDrainPaused
		}
		return c.replay(ctx, batch)
	})
	if n > 0 {
		c.log.Info("spool drained into PostgreSQL", "records", n, "pending", c.spool.Stats().Records)
	}
	switch {
	case err == nil:
		c.setHealthy(true, nil)
	case ctx.Err() != nil || errors.Is(err, errDrainPaused):
	case persistence.IsUnavailable(err):
		c.setHealthy(false, err)
	default:
		c.log.Error("cannot drain the spool", "err", err)
	}
}

// drainReady says whether a drain can proceed: push maintenance off, and PostgreSQL reachable
// (asked again when the last attempt found it away).
func (c *control) drainReady(ctx context.Context) error {
	if c.maint.Push() {
		return errDrainPaused
	}
	if c.dbHealthy.Load() {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return c.store.Ping(pctx)
}

// orphanLease queues the lease of a failed pop for release; implements actors.Deps.OrphanLease.
func (c *control) orphanLease(id uuid.UUID) {
	select {
	case c.orphans <- id:
	default: // thousands pending: the rest expire on their own
	}
}

// releaseOrphans frees the leases of failed pops. Until PostgreSQL answers they stay queued.
func (c *control) releaseOrphans(ctx context.Context) {
	var ids []uuid.UUID
collect:
	for len(ids) < cap(c.orphans) {
		select {
		case id := <-c.orphans:
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
	n, err := c.store.ReleaseLeases(rctx, ids)
	if err != nil {
		for _, id := range ids {
			c.orphanLease(id)
		}
		return
	}
	if n > 0 {
		c.log.Info("released leases of pops that failed while the database was away", "partitions", n)
	}
}

func (c *control) setHealthy(ok bool, err error) {
	if c.dbHealthy.Swap(ok) == ok {
		return
	}
	if ok {
		c.log.Info("PostgreSQL is back: pushes go to it again once the spool is drained")
	} else {
		c.log.Warn("spool drain paused: PostgreSQL unreachable", "err", err)
	}
}

// replay stores one batch of spooled pushes. The original transactionIds make it idempotent:
// a record already stored (a crash after commit, or a push that committed after it was
// spooled) answers duplicate and is not stored twice.
func (c *control) replay(ctx context.Context, batch [][]byte) (map[int]string, error) {
	refused := map[int]string{}
	var items []persistence.PushItem
	var index []int
	for i, rec := range batch {
		it, err := persistence.DecodeSpoolRecord(rec)
		if err != nil {
			refused[i] = err.Error()
			continue
		}
		items = append(items, it)
		index = append(index, i)
	}
	if len(items) == 0 {
		return refused, nil
	}
	results, err := c.store.Push(ctx, items)
	if err != nil && persistence.IsUnavailable(err) {
		return nil, err
	}
	if err != nil {
		// One record the database refuses for good must not hold back the others.
		results = make([]persistence.PushResult, len(items))
		for k, it := range items {
			res, err := c.store.Push(ctx, []persistence.PushItem{it})
			if err != nil && persistence.IsUnavailable(err) {
				return nil, err
			}
			if err != nil {
				refused[index[k]] = err.Error()
				continue
			}
			results[k] = res[0]
		}
	}
	woken := map[string][]string{}
	for k, r := range results {
		if r.Status == persistence.StatusFailed {
			// A clear record for a queue flagged encrypted since, and no key: keep it out
			// of the database, in the failed records, rather than store it in clear.
			refused[index[k]] = r.Error
			continue
		}
		if r.Status == persistence.StatusQueued {
			woken[items[k].Queue] = append(woken[items[k].Queue], items[k].Partition)
		}
	}
	for q, parts := range woken {
		c.Notify(q, parts)
	}
	return refused, nil
}

// loadFlags applies the flags stored in queen.system_state: a restarted broker comes back in
// the mode it left.
func (c *control) loadFlags(ctx context.Context) error {
	push, err := c.store.Flag(ctx, persistence.FlagPushMaintenance)
	if err != nil {
		return err
	}
	pop, err := c.store.Flag(ctx, persistence.FlagPopMaintenance)
	if err != nil {
		return err
	}
	c.applyPush(push)
	c.applyPop(pop)
	return nil
}

// flip applies a flag change made here or by a peer.
func (c *control) flip(apply func(bool), on bool) {
	c.flips.Add(1)
	apply(on)
}

// applyPush and applyPop change the in-memory flags and do what a change implies here.
func (c *control) applyPush(on bool) {
	if !c.maint.SetPush(on) {
		return
	}
	c.log.Info("push maintenance changed", "enabled", on)
	if !on {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
}

func (c *control) applyPop(on bool) {
	if !c.maint.SetPop(on) {
		return
	}
	c.log.Info("pop maintenance changed", "enabled", on)
	if on && c.actors != nil {
		c.actors.PausePops()
	}
}

// SetMaintenance implements http.Control. The flag is stored first: a broker restarted, or a
// peer that missed the frame, reads it back from queen.system_state.
func (c *control) SetMaintenance(ctx context.Context, on bool) error {
	if err := c.store.SetFlag(ctx, persistence.FlagPushMaintenance, on); err != nil {
		return err
	}
	c.flip(c.applyPush, on)
	if c.mesh != nil {
		c.mesh.SetMaintenance(on)
	}
	return nil
}

// SetPopMaintenance implements http.Control.
func (c *control) SetPopMaintenance(ctx context.Context, on bool) error {
	if err := c.store.SetFlag(ctx, persistence.FlagPopMaintenance, on); err != nil {
		return err
	}
	c.flip(c.applyPop, on)
	if c.mesh != nil {
		c.mesh.SetPopMaintenance(on)
	}
	return nil
}

// RefreshFlags implements http.Control; it is also the floor that heals a lost mesh frame. A
// flip that happened while it read is newer than what it read, so it wins.
func (c *control) RefreshFlags(ctx context.Context) {
	before := c.flips.Load()
	push, err := c.store.Flag(ctx, persistence.FlagPushMaintenance)
	if err == nil {
		var pop bool
		if pop, err = c.store.Flag(ctx, persistence.FlagPopMaintenance); err == nil && c.flips.Load() == before {
			c.applyPush(push)
			c.applyPop(pop)
		}
	}
	if err != nil {
		c.log.Debug("cannot re-read the maintenance flags; keeping the ones in memory", "err", err)
	}
}

func (c *control) SpoolStats() spool.Stats { return c.spool.Stats() }

func (c *control) DBHealthy() bool { return c.dbHealthy.Load() }

// Notify implements http.Control: the wake-up a committed push sends, here and to the peers.
func (c *control) Notify(queue string, partitions []string) {
	c.actors.Wake(queue, partitions)
	if c.mesh != nil {
		c.mesh.MessageAvailable(queue, partitions)
	}
}

type peerJSON struct {
	Addr      string `json:"host"`
	Alive     bool   `json:"alive"`
	Connected bool   `json:"connected"`
	LastSeen  string `json:"lastSeen,omitempty"`
	ServerID  string `json:"serverId"`
}

// SharedState implements http.Control.
func (c *control) SharedState() any {
	base := map[string]any{
		"server_id":            c.cfg.ServerID,
		"maintenance_mode":     c.maint.Push(),
		"pop_maintenance_mode": c.maint.Pop(),
	}
	if c.mesh == nil {
		base["enabled"], base["reason"] = false, "no_peers"
		return base
	}
	st := c.mesh.Stats()
	peers := make([]peerJSON, len(st.Peers))
	alive, dead := 0, 0
	for i, p := range st.Peers {
		peers[i] = peerJSON{Addr: p.Addr, Alive: p.Alive, Connected: p.Connected, ServerID: p.ServerID}
		if !p.LastSeen.IsZero() {
			peers[i].LastSeen = p.LastSeen.UTC().Format(time.RFC3339Nano)
		}
		if p.Alive {
			alive++
		} else {
			dead++
		}
	}
	base["enabled"], base["running"], base["transport"] = true, true, "tcp-mesh"
	base["authenticated"] = st.Authenticated
	base["port"] = c.cfg.MeshPort
	base["peer_count"], base["peers"] = len(peers), peers
	base["servers_alive"], base["servers_dead"] = alive, dead
	base["messages_sent"], base["messages_received"], base["messages_dropped"] = st.FramesSent, st.FramesReceived, st.FramesDropped
	base["handshake_failures"], base["signature_failures"] = st.HandshakeFailures, st.MACFailures
	base["sequence_rejections"], base["oversized_frames"] = st.SequenceRejections, st.OversizedFrames
	return base
}

// mesh.Handler: what peers announce.

func (c *control) MessageAvailable(queue, partition string) {
	var parts []string
	if partition != "" {
		parts = []string{partition}
	}
	c.actors.Wake(queue, parts)
}

// QueueConfigChanged re-reads which queues are encrypted (the only queue setting cached here;
// the rest is read from PostgreSQL on every pop), and lets pops parked before the queue
// existed re-check it.
func (c *control) QueueConfigChanged(queue string) {
	if c.encrypted != nil {
		c.encrypted.Kick()
	}
	c.actors.Wake(queue, nil)
}

// AnnounceQueueChange implements http.Control: a queue was configured or deleted here.
func (c *control) AnnounceQueueChange(queue string, deleted bool) {
	if c.mesh != nil {
		c.mesh.QueueConfigChanged(queue, deleted)
	}
}

func (c *control) MaintenanceChanged(on bool) { c.flip(c.applyPush, on) }

func (c *control) PopMaintenanceChanged(on bool) { c.flip(c.applyPop, on) }

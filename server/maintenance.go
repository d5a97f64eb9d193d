package server

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"queen/actors"
	"queen/background"
	"queen/persistence"
)

// peers is what this broker tells the other brokers: the mesh, or noPeers without one.
type peers interface {
	MessageAvailable(queue string, partitions []string)
	QueueConfigChanged(queue string, deleted bool)
	SetMaintenance(on bool)
	SetPopMaintenance(on bool)
}

// noPeers is a broker alone: its announcements reach nobody.
type noPeers struct{}

func (noPeers) MessageAvailable(string, []string) {}
func (noPeers) QueueConfigChanged(string, bool)   {}
func (noPeers) SetMaintenance(bool)               {}
func (noPeers) SetPopMaintenance(bool)            {}

// loadFlags applies the flags stored in queen.system_state before anything reads them: a
// restarted broker comes back in the mode it left.
func loadFlags(ctx context.Context, store *persistence.Store, flags *actors.Maintenance) error {
	push, err := store.Flag(ctx, persistence.FlagPushMaintenance)
	if err != nil {
		return err
	}
	pop, err := store.Flag(ctx, persistence.FlagPopMaintenance)
	if err != nil {
		return err
	}
	flags.SetPush(push)
	flags.SetPop(pop)
	return nil
}

// maintenance changes the push and pop maintenance flags: in memory (flags, read on the hot
// paths), in queen.system_state (they survive a restart) and on the mesh. A change is stored
// first, then applied, then sent to the peers. It re-reads the stored flags periodically, the
// floor that heals a lost mesh frame.
type maintenance struct {
	log     *slog.Logger
	store   *persistence.Store
	flags   *actors.Maintenance
	actors  *actors.System
	peers   peers
	pushOff func() // push maintenance turned off: the spool drain resumes at once
	every   time.Duration
	// flips counts flag changes made here or announced by a peer, so a re-read from the
	// database that started before one does not undo it.
	flips atomic.Uint64
	loop  *background.Group
}

func newMaintenance(log *slog.Logger, store *persistence.Store, flags *actors.Maintenance, sys *actors.System,
	p peers, pushOff func(), every time.Duration) *maintenance {
	return &maintenance{log: log, store: store, flags: flags, actors: sys, peers: p, pushOff: pushOff, every: every}
}

// start runs the periodic re-read.
func (m *maintenance) start() {
	m.loop = background.NewGroup()
	m.loop.Every(m.every, nil, func(ctx context.Context) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		m.Refresh(rctx)
	})
}

func (m *maintenance) stop() { m.loop.Stop() }

// SetPush turns push maintenance on or off on this broker and its peers.
func (m *maintenance) SetPush(ctx context.Context, on bool) error {
	if err := m.store.SetFlag(ctx, persistence.FlagPushMaintenance, on); err != nil {
		return err
	}
	m.flips.Add(1)
	m.applyPush(on)
	m.peers.SetMaintenance(on)
	return nil
}

// SetPop turns pop maintenance on or off on this broker and its peers.
func (m *maintenance) SetPop(ctx context.Context, on bool) error {
	if err := m.store.SetFlag(ctx, persistence.FlagPopMaintenance, on); err != nil {
		return err
	}
	m.flips.Add(1)
	m.applyPop(on)
	m.peers.SetPopMaintenance(on)
	return nil
}

// peerPush and peerPop apply what a peer announced (it stored the flag already).
func (m *maintenance) peerPush(on bool) {
	m.flips.Add(1)
	m.applyPush(on)
}

func (m *maintenance) peerPop(on bool) {
	m.flips.Add(1)
	m.applyPop(on)
}

// Refresh re-reads both flags. A flip that happened while it read is newer than what it read,
// so it wins; a database that cannot answer leaves the flags in memory as they are.
func (m *maintenance) Refresh(ctx context.Context) {
	before := m.flips.Load()
	push, err := m.store.Flag(ctx, persistence.FlagPushMaintenance)
	if err == nil {
		var pop bool
		if pop, err = m.store.Flag(ctx, persistence.FlagPopMaintenance); err == nil && m.flips.Load() == before {
			m.applyPush(push)
			m.applyPop(pop)
		}
	}
	if err != nil {
		m.log.Debug("cannot re-read the maintenance flags; keeping the ones in memory", "err", err)
	}
}

// applyPush and applyPop change the in-memory flags and do what a change implies here.
func (m *maintenance) applyPush(on bool) {
	if !m.flags.SetPush(on) {
		return
	}
	m.log.Info("push maintenance changed", "enabled", on)
	if !on {
		m.pushOff()
	}
}

func (m *maintenance) applyPop(on bool) {
	if !m.flags.SetPop(on) {
		return
	}
	m.log.Info("pop maintenance changed", "enabled", on)
	if on {
		m.actors.PausePops()
	}
}

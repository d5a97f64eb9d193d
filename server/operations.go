package server

import (
	"context"
	"time"

	"queen/actors"
	"queen/config"
	queenhttp "queen/http"
	"queen/mesh"
	"queen/persistence"
	"queen/spool"
	"queen/writer"
)

// operations is the control surface the HTTP routes use (http.Control), over the services that
// own each part: maintenance flags, the spool and its drain, the mesh, the statistics.
type operations struct {
	cfg    config.Config
	maint  *maintenance
	drain  *drain
	actors *actors.System
	peers  peers
	mesh   *mesh.Mesh // nil without peers
	obs    *observability
}

// RefreshStats flushes this broker's per-minute statistics now.
func (o *operations) RefreshStats(ctx context.Context) (queenhttp.StatsRefresh, error) {
	out, err := o.obs.flushNow(ctx)
	f := out.flushed
	return queenhttp.StatsRefresh{Queues: f.Queues, Partitions: f.Partitions, Namespaces: f.Namespaces, Tasks: f.Tasks,
		Forgotten: out.forgotten}, err
}

func (o *operations) SetMaintenance(ctx context.Context, on bool) error {
	return o.maint.SetPush(ctx, on)
}

func (o *operations) SetPopMaintenance(ctx context.Context, on bool) error {
	return o.maint.SetPop(ctx, on)
}

func (o *operations) RefreshFlags(ctx context.Context) { o.maint.Refresh(ctx) }

func (o *operations) SpoolStats() spool.Stats { return o.drain.spool.Stats() }

func (o *operations) DBHealthy() bool { return o.drain.healthy.Load() }

// Notify is the wake-up a committed push sends, here and to the peers (the mesh carries the
// queue's stored name).
func (o *operations) Notify(queue persistence.QueueName, partitions []string) {
	o.actors.Wake(queue, partitions)
	o.peers.MessageAvailable(queue.Stored(), partitions)
}

// AnnounceQueueChange tells the peers that a queue was configured or deleted here.
func (o *operations) AnnounceQueueChange(queue persistence.QueueName, deleted bool) {
	o.peers.QueueConfigChanged(queue.Stored(), deleted)
}

type peerJSON struct {
	Addr      string `json:"host"`
	Alive     bool   `json:"alive"`
	Connected bool   `json:"connected"`
	LastSeen  string `json:"lastSeen,omitempty"`
	ServerID  string `json:"serverId"`
}

// SharedState is the body of the shared-state routes.
func (o *operations) SharedState() any {
	flags := o.maint.flags
	base := map[string]any{
		"server_id":            o.cfg.ServerID,
		"maintenance_mode":     flags.Push(),
		"pop_maintenance_mode": flags.Pop(),
	}
	if o.mesh == nil {
		base["enabled"], base["reason"] = false, "no_peers"
		return base
	}
	st := o.mesh.Stats()
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
	base["port"] = o.cfg.MeshPort
	base["peer_count"], base["peers"] = len(peers), peers
	base["servers_alive"], base["servers_dead"] = alive, dead
	base["messages_sent"], base["messages_received"], base["messages_dropped"] = st.FramesSent, st.FramesReceived, st.FramesDropped
	base["handshake_failures"], base["signature_failures"] = st.HandshakeFailures, st.MACFailures
	base["sequence_rejections"], base["oversized_frames"] = st.SequenceRejections, st.OversizedFrames
	return base
}

// meshInbox applies what the peers announce (mesh.Handler). The mesh names a queue by its
// stored name; the actors know it as a persistence.QueueName.
type meshInbox struct {
	actors    *actors.System
	maint     *maintenance
	encrypted *writer.EncryptedQueues
}

func (m *meshInbox) MessageAvailable(queue, partition string) {
	var parts []string
	if partition != "" {
		parts = []string{partition}
	}
	m.actors.Wake(persistence.ParseQueueName(queue), parts)
}

// QueueConfigChanged re-reads which queues are encrypted (the only queue setting cached here;
// the rest is read from PostgreSQL on every pop), and lets pops parked before the queue
// existed re-check it.
func (m *meshInbox) QueueConfigChanged(queue string) {
	m.encrypted.Kick()
	m.actors.Wake(persistence.ParseQueueName(queue), nil)
}

func (m *meshInbox) MaintenanceChanged(on bool) { m.maint.peerPush(on) }

func (m *meshInbox) PopMaintenanceChanged(on bool) { m.maint.peerPop(on) }

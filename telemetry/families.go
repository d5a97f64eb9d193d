// Package telemetry is what the broker counts about itself and how it shows it: the catalogue
// of its Prometheus families, the request counters, latency histograms and per-queue message
// counts that the HTTP handlers feed, the /metrics/prometheus page (# HELP and # TYPE on every
// family), the per-queue, per-group and cluster-wide families rendered from the periodic
// database read, the rates of the rates log line, and the process figures of GET /metrics.
// The packages that own other counters (actors, fusion, mesh, server) register them in the
// Set handed to them; their families are described here, so the page and the documentation
// have one source.
package telemetry

import "strings"

// Family is one metric family of /metrics/prometheus.
type Family struct {
	Name   string
	Type   string // counter, gauge or histogram
	Labels string // "" when none
	Help   string
}

// queueLabels are the labels of a per-queue family: tenant only on a tenant's queue.
const queueLabels = "queue, tenant"

// Families lists every family the broker exposes, beside the go_* and process_* families of
// the Go runtime and the operating system.
var Families = []Family{
	// Process and requests, per broker (a restart starts them over).
	{"queen_uptime_seconds", "gauge", "", "Seconds since this broker started."},
	{"queen_process_resident_memory_bytes", "gauge", "", "Resident memory of this broker process (RSS), in bytes."},
	{"queen_process_push_requests_total", "counter", "", "Push requests this broker answered."},
	{"queen_process_push_messages_total", "counter", "", "Messages this broker stored in PostgreSQL or the disk spool, from pushes and transactions."},
	{"queen_process_pop_requests_total", "counter", "", "Pop requests this broker answered, long-polls included."},
	{"queen_process_pop_messages_total", "counter", "", "Messages this broker delivered to pops."},
	{"queen_process_pop_empty_total", "counter", "", "Pop requests this broker answered without a message."},
	{"queen_process_ack_requests_total", "counter", "", "Acknowledgement requests (single and batch) this broker answered."},
	{"queen_process_ack_messages_total", "counter", "", "Acknowledgements PostgreSQL applied for this broker, from ack routes and transactions, whatever their status."},
	{"queen_process_transactions_total", "counter", "", "Transaction requests this broker answered."},
	{"queen_process_dlq_total", "counter", "", "Messages this broker's acknowledgements moved to the dead-letter queue."},
	{"queen_process_stream_cycles_total", "counter", "", "Stream cycle requests (POST /streams/v1/cycle) this broker answered."},
	{"queen_process_db_errors_total", "counter", "", "Failed database transaction attempts of this broker (push, pop, ack, transaction, admin writes, metrics read), retried ones included."},
	{"queen_request_duration_seconds", "histogram", "op", "Time to answer a request, by op: push, pop (no wait), pop_wait (long-poll, its wait included), ack, transaction, stream_cycle."},

	// Long-polls and pops, per broker (package actors).
	{"queen_pop_parked", "gauge", "", "Long-poll pops parked on this broker, waiting for messages."},
	{"queen_pop_queries_total", "counter", "", "Database pops the queue actors of this broker ran."},
	{"queen_pop_parked_refused_total", "counter", "", "Long-polls answered empty at once because QUEEN_MAX_PARKED_PER_QUEUE or QUEEN_MAX_PARKED was reached."},
	{"queen_queue_parked_consumers", "gauge", queueLabels, "Long-poll pops parked on this broker, by queue (queues that exist only)."},

	// Fusion, per broker (package fusion).
	{"queen_batches_fired_total", "counter", "op", "Fused database calls (one transaction each) of push or ack."},
	{"queen_batch_items_fired_total", "counter", "op", "Items carried by the fused calls of push or ack."},
	{"queen_fusion_items_per_batch", "histogram", "op", "Items per fused call of push or ack."},
	{"queen_batch_rtt_seconds", "histogram", "op", "Time of one fused call of push or ack (its database transaction)."},

	// Pool, spool, maintenance, per broker (package server).
	{"queen_db_pool_size", "gauge", "", "Connections the PostgreSQL pool may open (DB_POOL_SIZE)."},
	{"queen_db_pool_idle", "gauge", "", "Open PostgreSQL connections not in use."},
	{"queen_db_pool_active", "gauge", "", "PostgreSQL connections in use."},
	{"queen_db_pool_waits_total", "counter", "", "Connection acquisitions that had to wait for a free connection."},
	{"queen_db_pool_wait_seconds_total", "counter", "", "Time spent waiting for a free connection, summed; its rate is the mean number of callers waiting."},
	{"queen_file_buffer_pending", "gauge", "", "Pushes in the disk spool waiting to be replayed into PostgreSQL."},
	{"queen_file_buffer_failed", "gauge", "", "Spool records PostgreSQL refused, kept in the spool's failed/ directory."},
	{"queen_file_buffer_paced_pushes_total", "counter", "", "Pushes into the disk spool that waited for its drain to get ahead of them (at most FILE_BUFFER_DB_WAIT_MS each)."},
	{"queen_file_buffer_paced_wait_seconds_total", "counter", "", "Time pushes waited for the spool's drain, summed."},
	{"queen_spool_full_refused_messages_total", "counter", "", "Pushed messages refused with 503 spool_full because the disk spool was full (FILE_BUFFER_MAX_BYTES or the disk); the series appears at the first refusal."},
	{"queen_file_buffer_db_healthy", "gauge", "", "1 while this broker reaches PostgreSQL, 0 while pushes go to the spool."},
	{"queen_maintenance_mode_enabled", "gauge", "", "1 while push maintenance is on (pushes go to the spool)."},
	{"queen_pop_maintenance_mode_enabled", "gauge", "", "1 while pop maintenance is on (pops answer empty)."},

	// Mesh, per broker (package mesh).
	{"queen_servers", "gauge", "state", "Peer brokers alive (heard from within QUEEN_SYNC_DEAD_THRESHOLD_MS) or dead."},
	{"queen_transport_messages_total", "counter", "dir", "Mesh frames sent, received, or dropped because a peer's queue was full."},
	{"queen_mesh_refused_total", "counter", "reason", "Mesh connections refused at the handshake, and frames refused for a bad MAC, an out-of-order sequence number or their size."},

	// Per queue and per consumer group, from the periodic read.
	{"queen_queue_push_messages_total", "counter", queueLabels, "Messages this broker stored for the queue."},
	{"queen_queue_pop_messages_total", "counter", queueLabels, "Messages this broker delivered from the queue."},
	{"queen_queue_ack_messages_total", "counter", queueLabels, "Acknowledgements PostgreSQL applied on the queue for this broker."},
	{"queen_queue_pending_messages", "gauge", queueLabels, "Messages of the queue not yet consumed in queue mode (no consumer group), leased ones included."},
	{"queen_queue_oldest_pending_age_seconds", "gauge", queueLabels, "Age of the queue's oldest message not yet consumed in queue mode; 0 when none."},
	{"queen_dlq_depth_by_queue", "gauge", queueLabels, "Dead-letter entries of the queue (one per message and consumer group)."},
	{"queen_consumer_group_lag_messages", "gauge", "consumer_group, " + queueLabels, "Messages of the queue after the group's cursors, on the partitions the group has read."},
	{"queen_consumer_group_lag_seconds", "gauge", "consumer_group, " + queueLabels, "Age of the oldest message of the queue the group has not consumed; 0 when caught up."},
	{"queen_stream_state_rows", "gauge", "query, tenant", "State rows a stream query keeps (every source partition), tenant only on a tenant's query."},
	{"queen_stream_state_bytes", "gauge", "query, tenant", "Stored size of a stream query's state values, in bytes."},

	// Cluster-wide, from the periodic read: the same on every broker of a cluster.
	{"queen_cluster_push_requests_total", "counter", "", "Push requests answered by every broker of the cluster over the life of its database."},
	{"queen_cluster_push_messages_total", "counter", "", "Messages stored by every broker of the cluster."},
	{"queen_cluster_pop_requests_total", "counter", "", "Pop requests answered by every broker of the cluster."},
	{"queen_cluster_pop_messages_total", "counter", "", "Messages delivered by every broker of the cluster."},
	{"queen_cluster_pop_empty_total", "counter", "", "Pop requests answered without a message by every broker of the cluster."},
	{"queen_cluster_ack_requests_total", "counter", "", "Acknowledgement requests answered by every broker of the cluster."},
	{"queen_cluster_ack_messages_total", "counter", "", "Acknowledgements applied for every broker of the cluster."},
	{"queen_cluster_transactions_total", "counter", "", "Transaction requests answered by every broker of the cluster."},
	{"queen_cluster_dlq_total", "counter", "", "Messages dead-lettered by the acknowledgements of every broker of the cluster."},
	{"queen_cluster_stream_cycles_total", "counter", "", "Stream cycle requests answered by every broker of the cluster."},
	{"queen_cluster_db_errors_total", "counter", "", "Failed database transaction attempts of every broker of the cluster."},
	{"queen_cluster_queues", "gauge", "", "Queues in the database."},
	{"queen_cluster_pending_messages", "gauge", "", "Messages not yet consumed in queue mode, over every queue."},
	{"queen_dlq_depth", "gauge", "", "Dead-letter entries over every queue."},

	// The periodic read itself.
	{"queen_metrics_series_dropped", "gauge", "kind", "Queues (kind=queue) or (consumer group, queue) pairs (kind=consumer_group) left without series of their own at the last read, over QUEEN_METRICS_MAX_SERIES."},
	{"queen_metrics_refresh_seconds", "gauge", "", "How long the last periodic metrics read took."},
	{"queen_metrics_refresh_age_seconds", "gauge", "", "Seconds since the last successful periodic metrics read; -1 before the first."},
}

var byName = func() map[string]Family {
	m := make(map[string]Family, len(Families))
	for _, f := range Families {
		m[f.Name] = f
	}
	return m
}()

// help is the help text of a family; the families of the Go runtime and the operating system,
// which the metrics library writes, get a generic one.
func help(family string) string {
	if f, ok := byName[family]; ok {
		return f.Help
	}
	return RuntimeHelp(family, "broker")
}

// RuntimeHelp is the help text of a family of the Go runtime or the operating system, which
// the metrics library writes, for a program (broker, proxy); "" for other families.
func RuntimeHelp(family, program string) string {
	switch {
	case strings.HasPrefix(family, "go_"):
		return "Go runtime statistic of this " + program + " process."
	case strings.HasPrefix(family, "process_"):
		return "Operating-system statistic of this " + program + " process."
	}
	return ""
}

package server

import (
	"log/slog"
	"strings"

	"queen/config"
)

// logSettings writes the resolved configuration at boot, one "config: <subsystem>" line per
// subsystem, so an operator sees what the broker runs with rather than what they meant to set.
// A secret shows only as set or unset. PostgreSQL gets its line from pg.Reach, which resolves
// the TLS mode first.
func logSettings(c config.Config, log *slog.Logger) {
	log.Info("config: server", "bind_addr", c.BindAddr, "port", c.Port, "server_id", c.ServerID,
		"max_body_bytes", c.MaxBodyBytes, "max_items_per_request", c.MaxRequestItems,
		"max_connections", c.MaxConnections, "request_deadline", c.RequestDeadline,
		"cors_origins", strings.Join(c.CORSOrigins, ","), "pprof_addr", c.PprofAddr)
	a := c.JWT
	if a.Enabled {
		log.Info("config: auth", "jwt_enabled", true, "algorithm", a.Algorithm, "secret", secret(a.Secret),
			"public_key", secret(a.PublicKey), "jwks_url", a.JWKSURL, "issuer", a.Issuer, "audience", a.Audience,
			"clock_skew", a.ClockSkew, "skip_paths", strings.Join(a.SkipPaths, ","))
	} else {
		log.Info("config: auth", "jwt_enabled", false)
	}
	log.Info("config: sync", "enabled", c.MeshEnabled, "port", c.MeshPort, "bind_addr", c.MeshBindAddr,
		"peers", strings.Join(c.MeshPeers, ","), "advertise_host", c.AdvertiseHost, "secret", secret(c.MeshSecret),
		"heartbeat", c.MeshHeartbeat, "dead_after", c.MeshDeadAfter)
	log.Info("config: engine", "push_max_batch", c.PushMaxBatch, "push_lanes", c.PushLanes,
		"ack_max_batch", c.AckMaxBatch, "ack_in_flight", c.AckInFlight)
	log.Info("config: flow", "default_timeout", c.DefaultTimeout, "default_batch_size", c.DefaultBatchSize,
		"default_subscription_mode", c.DefaultSubscriptionMode, "pop_wait_initial", c.PopWaitInitialInterval,
		"pop_wait_backoff_threshold", c.PopWaitBackoffThreshold, "pop_wait_backoff_multiplier", c.PopWaitBackoffMultiplier,
		"pop_wait_max", c.PopWaitMaxInterval, "max_parked_per_queue", c.MaxParkedPerQueue, "max_parked", c.MaxParked)
	log.Info("config: jobs", "retention_interval", c.RetentionInterval, "retention_batch_size", c.RetentionBatchSize,
		"eviction_interval", c.EvictionInterval, "eviction_batch_size", c.EvictionBatchSize,
		"partition_cleanup_days", c.PartitionCleanupDays, "stats_retention_days", c.StatsRetentionDays)
	log.Info("config: file_buffer", "dir", c.SpoolDir, "flush", c.SpoolFlush, "max_batch", c.SpoolMaxBatch,
		"db_wait", c.SpoolAfter, "flags_refresh", c.FlagsRefresh)
	log.Info("config: security", "encryption_key", secret(string(c.EncryptionKey)), "tenancy_header", c.TenancyHeader,
		"trusted_proxy", c.TrustedProxy, "metrics_bind_addr", c.MetricsBindAddr)
	log.Info("config: metrics", "refresh", c.MetricsRefresh, "max_series", c.MetricsMaxSeries, "log_rates", c.LogRates)
	log.Info("config: logging", "level", c.LogLevel.String())
}

// secret shows whether a secret is set, never its value.
func secret(v string) string {
	if v == "" {
		return "unset"
	}
	return "set"
}

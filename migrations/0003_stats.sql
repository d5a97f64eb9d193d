-- Per-minute statistics behind the status and analytics routes (persistence/stats.go).
--
-- Every broker adds what it counted to its own rows, keyed by QUEEN_SERVER_ID and the minute
-- (bucket, the start of the minute): from the metrics service once a minute, and when it stops
-- (server/stats.go). Readers sum the brokers' rows, so every broker answers the same
-- cluster-wide figures; nothing here is read per message. Rows older than
-- QUEEN_STATS_RETENTION_DAYS are deleted by the retention job.
--
-- A queue is its id, not its name: a queue deleted and created again starts a new history, and
-- the readers join queen.queues for the name, the tenant and the namespace and task filters
-- (rows of a deleted queue are never shown and age out). There is no foreign key: a flush would
-- pay its check on every row, and deleting a queue would have to delete its history at once.

-- One queue on one broker in one minute. Counters are what happened in that minute; lag is
-- measured at pop (the age of each delivered message), parked is a gauge sampled whenever the
-- broker samples its figures (parked_sum over samples is the mean).
CREATE TABLE queen.stats_queues (
    bucket                   timestamptz NOT NULL,
    queue_id                 uuid NOT NULL,
    server_id                text NOT NULL,
    push_requests            bigint NOT NULL DEFAULT 0,
    push_messages            bigint NOT NULL DEFAULT 0,
    pop_requests             bigint NOT NULL DEFAULT 0,
    pop_messages             bigint NOT NULL DEFAULT 0,
    pop_empty                bigint NOT NULL DEFAULT 0,
    ack_requests             bigint NOT NULL DEFAULT 0,
    ack_success              bigint NOT NULL DEFAULT 0,
    ack_failed               bigint NOT NULL DEFAULT 0,
    dlq                      bigint NOT NULL DEFAULT 0,
    transactions             bigint NOT NULL DEFAULT 0,
    lag_sum_ms               bigint NOT NULL DEFAULT 0,
    lag_max_ms               bigint NOT NULL DEFAULT 0,
    parked_sum               bigint NOT NULL DEFAULT 0,
    samples                  integer NOT NULL DEFAULT 0,
    -- The queue's partitions when the broker flushed (a snapshot: readers take the largest).
    partition_count          integer,
    -- Written by the retention job, on the broker that ran it.
    partitions_deleted       bigint NOT NULL DEFAULT 0,
    retention_messages       bigint NOT NULL DEFAULT 0,
    completed_messages       bigint NOT NULL DEFAULT 0,
    eviction_messages        bigint NOT NULL DEFAULT 0,
    cleanup_events           bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, queue_id, server_id)
);

-- One broker in one minute: its request and message counters over every queue (pops of queues
-- that do not exist included), and its process figures sampled during the minute: for each,
-- the sum over the samples (the mean is sum / samples), the smallest, the largest and the last.
-- cpu_* are CPU time over wall time between two samples, in hundredths of a percent (10000 is
-- one core busy), as the reference broker stores them.
CREATE TABLE queen.stats_brokers (
    bucket           timestamptz NOT NULL,
    server_id        text NOT NULL,
    port             integer NOT NULL,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    push_requests    bigint NOT NULL DEFAULT 0,
    push_messages    bigint NOT NULL DEFAULT 0,
    pop_requests     bigint NOT NULL DEFAULT 0,
    pop_messages     bigint NOT NULL DEFAULT 0,
    pop_empty        bigint NOT NULL DEFAULT 0,
    ack_requests     bigint NOT NULL DEFAULT 0,
    ack_messages     bigint NOT NULL DEFAULT 0,
    ack_failed       bigint NOT NULL DEFAULT 0,
    transactions     bigint NOT NULL DEFAULT 0,
    dlq              bigint NOT NULL DEFAULT 0,
    db_errors        bigint NOT NULL DEFAULT 0,
    lag_sum_ms       bigint NOT NULL DEFAULT 0,
    lag_max_ms       bigint NOT NULL DEFAULT 0,
    samples          integer NOT NULL DEFAULT 0,
    cpu_user_sum     float8 NOT NULL DEFAULT 0,
    cpu_user_min     float8,
    cpu_user_max     float8,
    cpu_user_last    float8,
    cpu_system_sum   float8 NOT NULL DEFAULT 0,
    cpu_system_min   float8,
    cpu_system_max   float8,
    cpu_system_last  float8,
    rss_sum          float8 NOT NULL DEFAULT 0,
    rss_min          float8,
    rss_max          float8,
    rss_last         float8,
    vsz_sum          float8 NOT NULL DEFAULT 0,
    vsz_min          float8,
    vsz_max          float8,
    vsz_last         float8,
    pool_size_sum    float8 NOT NULL DEFAULT 0,
    pool_size_min    float8,
    pool_size_max    float8,
    pool_size_last   float8,
    pool_idle_sum    float8 NOT NULL DEFAULT 0,
    pool_idle_min    float8,
    pool_idle_max    float8,
    pool_idle_last   float8,
    pool_active_sum  float8 NOT NULL DEFAULT 0,
    pool_active_min  float8,
    pool_active_max  float8,
    pool_active_last float8,
    pool_free_sum    float8 NOT NULL DEFAULT 0,
    pool_free_min    float8,
    pool_free_max    float8,
    pool_free_last   float8,
    PRIMARY KEY (bucket, server_id)
);

-- Lifetime counters of every broker of the cluster (requests, messages, dead letters, database
-- errors), keyed by QUEEN_SERVER_ID. Each broker adds what it counted since its last flush from
-- its periodic metrics read, then reads the sums: every broker reports the same queen_cluster_*
-- totals, and a restart loses nothing already flushed. Two brokers sharing a server id add into
-- the same rows, which keeps the sums right.
CREATE TABLE queen.broker_counters (
    server_id  text NOT NULL,
    name       text NOT NULL,
    value      bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (server_id, name)
);

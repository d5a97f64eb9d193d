-- One pipeline for a broker's counts (persistence/stats.go): the statistics flush adds what a
-- broker counted to its per-minute row of queen.stats_brokers and, in the same transaction, to
-- its lifetime row here. The queen_cluster_*_total families sum these rows, so the per-minute
-- statistics and the cluster's counters can no longer disagree, and a restart loses nothing
-- already flushed. Two brokers sharing a server id add into the same row, which keeps the sums
-- right. The columns are those of stats_brokers' counters.
ALTER TABLE queen.stats_brokers ADD COLUMN stream_cycles bigint NOT NULL DEFAULT 0;

CREATE TABLE queen.stats_totals (
    server_id     text PRIMARY KEY,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    push_requests bigint NOT NULL DEFAULT 0,
    push_messages bigint NOT NULL DEFAULT 0,
    pop_requests  bigint NOT NULL DEFAULT 0,
    pop_messages  bigint NOT NULL DEFAULT 0,
    pop_empty     bigint NOT NULL DEFAULT 0,
    ack_requests  bigint NOT NULL DEFAULT 0,
    ack_messages  bigint NOT NULL DEFAULT 0,
    ack_failed    bigint NOT NULL DEFAULT 0,
    transactions  bigint NOT NULL DEFAULT 0,
    dlq           bigint NOT NULL DEFAULT 0,
    db_errors     bigint NOT NULL DEFAULT 0,
    stream_cycles bigint NOT NULL DEFAULT 0,
    lag_sum_ms    bigint NOT NULL DEFAULT 0
);

-- The lifetime counts the brokers added to queen.broker_counters before this migration carry
-- over; ack_failed and lag_sum_ms were not kept there and start from 0.
INSERT INTO queen.stats_totals (server_id, push_requests, push_messages, pop_requests, pop_messages,
    pop_empty, ack_requests, ack_messages, transactions, dlq, db_errors, stream_cycles)
SELECT server_id,
    COALESCE(sum(value) FILTER (WHERE name = 'push_requests'), 0),
    COALESCE(sum(value) FILTER (WHERE name = 'push_messages'), 0),
    COALESCE(sum(value) FILTER (WHERE name = 'pop_requests'), 0),
    COALESCE(sum(value) FILTER (WHERE name = 'pop_messages'), 0),
    COALESCE(sum(value) FILTER (WHERE name = 'pop_empty'), 0),
    COALESCE(sum(value) FILTER (WHERE name = 'ack_requests'), 0),
    COALESCE(sum(value) FILTER (WHERE name = 'ack_messages'), 0),
    COALESCE(sum(value) FILTER (WHERE name = 'transactions'), 0),
    COALESCE(sum(value) FILTER (WHERE name = 'dlq'), 0),
    COALESCE(sum(value) FILTER (WHERE name = 'db_errors'), 0),
    COALESCE(sum(value) FILTER (WHERE name = 'stream_cycles'), 0)
FROM queen.broker_counters
GROUP BY server_id;

DROP TABLE queen.broker_counters;

-- ANALYZE no longer collects statistics on a segment's arrays. It read every sampled row's
-- arrays to compute element statistics that no query uses (the broker reads segments by
-- (partition_id, last_seq) only), which made an autovacuum ANALYZE of a few hundred MB of
-- segments last 7 s on an idle machine and over 20 s under load. ANALYZE holds a snapshot for
-- that long, so no backend could prune the dead versions of the cursor rows every pop and ack
-- rewrites: their updates stopped being HOT, partition_consumers grew tenfold, and consumption
-- ran at half its rate until the ANALYZE ended. The scalar columns keep their statistics.
ALTER TABLE queen.segments
    ALTER COLUMN ids SET STATISTICS 0,
    ALTER COLUMN transaction_ids SET STATISTICS 0,
    ALTER COLUMN trace_ids SET STATISTICS 0,
    ALTER COLUMN payloads SET STATISTICS 0,
    ALTER COLUMN encrypted SET STATISTICS 0,
    ALTER COLUMN producer_subs SET STATISTICS 0;

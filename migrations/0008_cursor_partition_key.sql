-- A cursor row no longer carries a foreign key to its partition. The key cost every pop that
-- met a partition for the first time two checks (the claim's insert, then the update of the
-- lease end on the row the same transaction inserted, which PostgreSQL checks again), each a
-- KEY SHARE lock on the partition row that dirties its page and writes WAL: at 100,000
-- partitions of a few messages each, where nearly every claim inserts a row, a tenth of the
-- pop's statement time. Whoever deletes partitions deletes their cursor rows in the same
-- transaction (the queue delete, the idle-partition cleanup); every reader joins the cursor to
-- its partition, so a row a pop wrote while its idle partition was being deleted is never read,
-- and the retention job sweeps such rows on its next run.
ALTER TABLE queen.partition_consumers DROP CONSTRAINT partition_consumers_partition_id_fkey;

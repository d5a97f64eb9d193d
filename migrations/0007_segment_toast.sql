-- A segment row keeps its ids, transactionIds and the small arrays in the row, uncompressed: by
-- default PostgreSQL compresses a row's values once it passes 2 KB, and after the payloads (lz4,
-- moved out of line) it compressed the transactionIds and ids of every segment with pglz, about
-- 4 % of its CPU under bench cost for values that hardly compress (random ids), and stored them
-- out of line too, so every pop read them back from the TOAST table. Rows up to a page now stay
-- as they are; past that, every column compresses with lz4. Rows written before keep their
-- storage until retention deletes them.
ALTER TABLE queen.segments SET (toast_tuple_target = 8160);
ALTER TABLE queen.segments
    ALTER COLUMN ids SET COMPRESSION lz4,
    ALTER COLUMN transaction_ids SET COMPRESSION lz4,
    ALTER COLUMN trace_ids SET COMPRESSION lz4,
    ALTER COLUMN encrypted SET COMPRESSION lz4,
    ALTER COLUMN producer_subs SET COMPRESSION lz4;

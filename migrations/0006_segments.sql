-- Messages are stored in segments: what one push commits to one partition (up to 100 messages)
-- is one row of queen.segments, its messages' fields in parallel arrays, instead of one row of
-- queen.messages per message. A message costs a hundredth of a heap tuple and index entry, its
-- payload is stored as the text the broker validated (PostgreSQL no longer parses it into jsonb
-- and prints it back), and the payloads compress with lz4 as one value.
--
-- * Sequence numbers are unchanged: a segment holds first_seq..last_seq of its partition, the
--   message at index i (1-based) has seq first_seq + i - 1. Cursors, leases, dead letters and
--   traces keep naming messages by (partition_id, seq).
-- * The primary key is (partition_id, last_seq): "the segments after the cursor" is a range of
--   the index starting at the segment that holds the cursor's successor.
-- * A deleted message keeps its place with NULL fields; pops and the views skip it. A segment
--   whose messages are all deleted is deleted, so every segment holds a message.
-- * created_at is the segment's (one push transaction's now()), as it was each row's before.
CREATE TABLE queen.segments (
    partition_id    uuid NOT NULL,
    last_seq        bigint NOT NULL,
    first_seq       bigint NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    ids             uuid[] NOT NULL,
    transaction_ids text[] NOT NULL,
    trace_ids       uuid[] NOT NULL,
    payloads        text[] COMPRESSION lz4 NOT NULL,
    encrypted       bool[] NOT NULL,
    producer_subs   text[] NOT NULL,
    PRIMARY KEY (partition_id, last_seq),
    CHECK (cardinality(ids) = last_seq - first_seq + 1)
);

-- Exactly-once push by transactionId: one narrow row per message, its key checked by the push's
-- insert. Acknowledgements and the message routes resolve a transactionId to its seq here.
CREATE TABLE queen.message_transactions (
    partition_id   uuid NOT NULL,
    transaction_id text NOT NULL CHECK (length(transaction_id) <= 255),
    seq            bigint NOT NULL,
    PRIMARY KEY (partition_id, transaction_id)
);

-- Upgrade in place: every stored message becomes a segment of one, under its own seq, so the
-- cursors and leases in force stay valid and consumption goes on where it was.
INSERT INTO queen.segments (partition_id, last_seq, first_seq, created_at, ids, transaction_ids, trace_ids,
                            payloads, encrypted, producer_subs)
SELECT partition_id, seq, seq, created_at, ARRAY[id], ARRAY[transaction_id], ARRAY[trace_id],
       ARRAY[payload::text], ARRAY[is_encrypted], ARRAY[producer_sub]
FROM queen.messages;
INSERT INTO queen.message_transactions (partition_id, transaction_id, seq)
SELECT partition_id, transaction_id, seq FROM queen.messages;

-- Dead letters and traces can no longer reference a message row; whoever deletes messages
-- (retention, the message and queue deletes) deletes them too.
ALTER TABLE queen.dead_letter_queue DROP CONSTRAINT dead_letter_queue_partition_id_message_seq_fkey;
ALTER TABLE queen.message_traces DROP CONSTRAINT message_traces_partition_id_message_seq_fkey;
DROP TABLE queen.messages;

-- One row per message, for the routes that browse and inspect: payload as jsonb, as before. The
-- hot paths (push, pop, ack) read and write segments directly; a lookup of one message by seq
-- goes through queen.message_at, which reads one segment instead of the partition's.
CREATE VIEW queen.messages AS
SELECT s.partition_id, s.first_seq + u.o - 1 AS seq, u.id, u.transaction_id, u.trace_id,
       u.payload::jsonb AS payload, s.created_at, u.is_encrypted, u.producer_sub
FROM queen.segments s
CROSS JOIN LATERAL unnest(s.ids, s.transaction_ids, s.trace_ids, s.payloads, s.encrypted, s.producer_subs)
    WITH ORDINALITY AS u(id, transaction_id, trace_id, payload, is_encrypted, producer_sub, o)
WHERE u.id IS NOT NULL;

-- The sequence numbers and times of the messages, for the counts: only the ids are read.
CREATE VIEW queen.message_seqs AS
SELECT s.partition_id, s.first_seq + u.o - 1 AS seq, s.created_at
FROM queen.segments s
CROSS JOIN LATERAL unnest(s.ids) WITH ORDINALITY AS u(id, o)
WHERE u.id IS NOT NULL;

-- The message of partition pid with sequence number n: the first segment ending at or after n.
CREATE FUNCTION queen.message_at(pid uuid, n bigint) RETURNS SETOF queen.messages
LANGUAGE sql STABLE AS $$
    SELECT s.partition_id, n, s.ids[i], s.transaction_ids[i], s.trace_ids[i], s.payloads[i]::jsonb,
           s.created_at, s.encrypted[i], s.producer_subs[i]
    FROM (SELECT * FROM queen.segments WHERE partition_id = pid AND last_seq >= n ORDER BY last_seq LIMIT 1) s
    CROSS JOIN LATERAL (SELECT (n - s.first_seq + 1)::int AS i) x
    WHERE s.first_seq <= n AND s.ids[i] IS NOT NULL
$$;
REVOKE EXECUTE ON FUNCTION queen.message_at(uuid, bigint) FROM PUBLIC;

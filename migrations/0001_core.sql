-- Core tables of the broker.
--
-- The layout follows the reference broker where it is sound (queues, partitions, messages,
-- partition_consumers, dead_letter_queue, consumer_groups_metadata, message_traces, system_state)
-- and departs from it where ordering or throughput demands:
--
-- * Every partition carries last_seq, the sequence number of its newest message. A push takes
--   the partition row FOR UPDATE, numbers its messages last_seq+1.. and writes the new head
--   before commit. That row lock serialises commits per partition, so sequence order is commit
--   order and a consumer cursor (a sequence number) can never be overtaken by a late commit.
--   The reference orders by (created_at, id) with created_at = transaction start, which loses
--   messages whose transaction started early and committed late.
-- * messages has no foreign key to partitions: the per-row RI check is a measurable share of
--   insert cost. Deleting a queue deletes its messages explicitly (persistence/admin.go).
-- * Hot, tiny tables (partitions, partition_consumers) keep free space in every page and have no
--   index on the columns each pop or push rewrites, so those updates stay HOT.

CREATE TABLE queen.queues (
    id                          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name                        text NOT NULL UNIQUE CHECK (length(name) <= 255),
    namespace                   text NOT NULL DEFAULT '',
    task                        text NOT NULL DEFAULT '',
    priority                    integer NOT NULL DEFAULT 0,
    lease_time                  integer NOT NULL DEFAULT 300,
    retry_limit                 integer NOT NULL DEFAULT 3,
    retry_delay                 integer NOT NULL DEFAULT 1000,
    max_size                    integer NOT NULL DEFAULT 0,
    ttl                         integer NOT NULL DEFAULT 3600,
    dead_letter_queue           boolean NOT NULL DEFAULT false,
    dlq_after_max_retries       boolean NOT NULL DEFAULT false,
    delayed_processing          integer NOT NULL DEFAULT 0,
    window_buffer               integer NOT NULL DEFAULT 0,
    retention_seconds           integer NOT NULL DEFAULT 0,
    completed_retention_seconds integer NOT NULL DEFAULT 0,
    retention_enabled           boolean NOT NULL DEFAULT false,
    encryption_enabled          boolean NOT NULL DEFAULT false,
    max_wait_time_seconds       integer NOT NULL DEFAULT 0,
    created_at                  timestamptz NOT NULL DEFAULT now(),
    updated_at                  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE queen.partitions (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    queue_id        uuid NOT NULL REFERENCES queen.queues (id) ON DELETE CASCADE,
    name            text NOT NULL CHECK (length(name) <= 255),
    created_at      timestamptz NOT NULL DEFAULT now(),
    last_seq        bigint NOT NULL DEFAULT 0,
    last_message_at timestamptz,
    UNIQUE (queue_id, name)
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 50);

CREATE TABLE queen.messages (
    partition_id   uuid NOT NULL,
    seq            bigint NOT NULL,
    id             uuid NOT NULL,
    transaction_id text NOT NULL CHECK (length(transaction_id) <= 255),
    trace_id       uuid,
    payload        jsonb NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    is_encrypted   boolean NOT NULL DEFAULT false,
    producer_sub   text,
    PRIMARY KEY (partition_id, seq)
);

-- Idempotent push: one message per (partition, transactionId).
CREATE UNIQUE INDEX messages_partition_transaction ON queen.messages (partition_id, transaction_id);

-- Cursor and lease of one consumer group on one partition. cursor_seq is the sequence number of
-- the last consumed message (0: nothing consumed); acks only move it forward, seek moves it
-- anywhere. A lease covers the messages up to lease_end_seq and is released when the cursor
-- reaches it, so a repeated or out-of-order ack cannot release it early (the reference counts
-- acks instead). lease_id has no index: it changes on every pop, and the one lookup by it (lease
-- renewal) scans this small table.
CREATE TABLE queen.partition_consumers (
    partition_id            uuid NOT NULL REFERENCES queen.partitions (id) ON DELETE CASCADE,
    consumer_group          text NOT NULL,
    cursor_seq              bigint NOT NULL DEFAULT 0,
    lease_id                uuid,
    lease_acquired_at       timestamptz,
    lease_expires_at        timestamptz,
    lease_end_seq           bigint NOT NULL DEFAULT 0,
    batch_size              integer NOT NULL DEFAULT 0,
    batch_retry_count       integer NOT NULL DEFAULT 0,
    total_messages_consumed bigint NOT NULL DEFAULT 0,
    total_batches_consumed  bigint NOT NULL DEFAULT 0,
    last_consumed_at        timestamptz,
    created_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, consumer_group)
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 50);

-- Where a named consumer group starts reading a partition it has never read: recorded by the
-- group's first pop with subscriptionMode=new or subscriptionFrom, applied to partitions the group
-- meets later. partition_name '' applies to every partition of the queue.
CREATE TABLE queen.consumer_groups_metadata (
    consumer_group         text NOT NULL,
    queue_name             text NOT NULL,
    partition_name         text NOT NULL DEFAULT '',
    subscription_mode      text NOT NULL,
    subscription_timestamp timestamptz NOT NULL,
    created_at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, queue_name, partition_name)
);

CREATE TABLE queen.dead_letter_queue (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    partition_id   uuid NOT NULL,
    message_seq    bigint NOT NULL,
    consumer_group text NOT NULL,
    error_message  text,
    retry_count    integer NOT NULL DEFAULT 0,
    failed_at      timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (partition_id, message_seq) REFERENCES queen.messages (partition_id, seq) ON DELETE CASCADE
);
CREATE INDEX dead_letter_queue_message ON queen.dead_letter_queue (partition_id, message_seq);
CREATE INDEX dead_letter_queue_failed_at ON queen.dead_letter_queue (failed_at);

CREATE TABLE queen.message_traces (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    partition_id   uuid NOT NULL,
    message_seq    bigint NOT NULL,
    transaction_id text NOT NULL,
    consumer_group text NOT NULL,
    event_type     text NOT NULL,
    data           jsonb NOT NULL,
    trace_names    text[] NOT NULL DEFAULT '{}',
    worker_id      text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (partition_id, message_seq) REFERENCES queen.messages (partition_id, seq) ON DELETE CASCADE
);
CREATE INDEX message_traces_message ON queen.message_traces (partition_id, message_seq);
CREATE INDEX message_traces_names ON queen.message_traces USING gin (trace_names);

-- Cluster-wide flags (push and pop maintenance) that survive a restart.
CREATE TABLE queen.system_state (
    key        text PRIMARY KEY,
    value      jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- State of the streaming SDKs' queries (persistence/streams.go, docs/streams.md).
--
-- A stream runs its operators in the client and keeps their state here, in the broker's
-- database, so that one transaction can commit a cycle: the state it changed, the messages it
-- emitted to its sink and the acknowledgement of the source messages it consumed.
--
-- The schema is the broker's alone, like queen: nothing is granted to PUBLIC (the reference
-- granted its streams schema to PUBLIC, so any role that could log in read every stream's
-- state). Deleting a query deletes its state (the foreign key); state of a source partition
-- that no longer exists is deleted by the retention job.

CREATE SCHEMA queen_streams;
REVOKE ALL ON SCHEMA queen_streams FROM PUBLIC;

-- One registered query. name is stored like a queue name: <tenant>\x1f<name> for a tenant's
-- query, the plain name for the default tenant's (persistence/tenant.go). source_queue and
-- sink_queue are stored queue names too, in the query's tenant.
CREATE TABLE queen_streams.queries (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name         text NOT NULL UNIQUE CHECK (length(name) <= 300),
    source_queue text NOT NULL CHECK (length(source_queue) <= 300),
    sink_queue   text CHECK (length(sink_queue) <= 300),
    config_hash  text NOT NULL CHECK (length(config_hash) <= 255),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- One key of one query's state on one source partition. partition_id has no foreign key: a
-- partition's idle cleanup and a queue's deletion must not pay for scanning state, and the
-- retention job removes the orphans in batches instead (the index below finds them).
CREATE TABLE queen_streams.state (
    query_id     uuid NOT NULL REFERENCES queen_streams.queries (id) ON DELETE CASCADE,
    partition_id uuid NOT NULL,
    key          text NOT NULL CHECK (octet_length(key) <= 1024),
    value        jsonb NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (query_id, partition_id, key)
) WITH (fillfactor = 80);

CREATE INDEX state_partition ON queen_streams.state (partition_id);

-- The proxy's control plane: the cells it forwards to, the API keys and users that reach them,
-- and the audit trail of what was done through it.

CREATE TABLE queen_proxy.cells (
    name         text PRIMARY KEY,
    upstream     text NOT NULL,
    -- Presented to the cell's brokers as a bearer token, so it is kept as given (not hashed).
    broker_token text NOT NULL DEFAULT '',
    tenant       text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE queen_proxy.api_keys (
    id          uuid PRIMARY KEY,
    -- SHA-256 of the secret; the secret itself is never stored.
    secret_hash bytea NOT NULL UNIQUE,
    cell        text NOT NULL REFERENCES queen_proxy.cells (name),
    classes     text[] NOT NULL CHECK (cardinality(classes) > 0
                    AND classes <@ ARRAY['produce', 'consume', 'queue_admin', 'read', 'operator']),
    hint        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);

CREATE TABLE queen_proxy.users (
    name          text PRIMARY KEY,
    cell          text NOT NULL REFERENCES queen_proxy.cells (name),
    role          text NOT NULL CHECK (role IN ('reader', 'writer', 'operator')),
    password_hash text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- The audit trail. GENERATED ALWAYS: a writer cannot choose the id, so ids follow insertion.
CREATE TABLE queen_proxy.operations (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    who        text NOT NULL,
    credential text NOT NULL,
    cell       text NOT NULL DEFAULT '',
    method     text NOT NULL,
    path       text NOT NULL,
    class      text NOT NULL,
    status     integer NOT NULL,
    request_id text NOT NULL DEFAULT ''
);

-- Append-only for every role, the owner included: privileges do not bind the owner, a trigger
-- does (only ALTER TABLE ... DISABLE TRIGGER, which the application role may not run, lifts it).
CREATE FUNCTION queen_proxy.operations_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'queen_proxy.operations is append-only: % refused', TG_OP;
END
$$;
REVOKE EXECUTE ON FUNCTION queen_proxy.operations_append_only() FROM PUBLIC;

CREATE TRIGGER operations_no_update_delete
    BEFORE UPDATE OR DELETE ON queen_proxy.operations
    FOR EACH ROW EXECUTE FUNCTION queen_proxy.operations_append_only();
CREATE TRIGGER operations_no_truncate
    BEFORE TRUNCATE ON queen_proxy.operations
    FOR EACH STATEMENT EXECUTE FUNCTION queen_proxy.operations_append_only();

-- The role every runtime statement runs as (the pool SETs it): it may read and write the tables
-- but only read and append to operations. Created when the connecting user may create roles;
-- otherwise the proxy runs as the connecting user and says so at start. A later migration that
-- adds a table must grant it here too.
DO $$
DECLARE
    -- SET ROLE needs membership before PostgreSQL 16, the SET option of it since.
    can_set text := CASE WHEN current_setting('server_version_num')::int >= 160000 THEN 'SET' ELSE 'MEMBER' END;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'queen_proxy_app') THEN
        IF NOT (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user) THEN
            RAISE NOTICE 'role % may not create roles: queen_proxy_app not created', current_user;
            RETURN;
        END IF;
        BEGIN
            CREATE ROLE queen_proxy_app NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL; -- roles are per cluster: another database's migration created it meanwhile
        END;
    END IF;
    GRANT USAGE ON SCHEMA queen_proxy TO queen_proxy_app;
    GRANT SELECT, INSERT, UPDATE, DELETE ON queen_proxy.cells, queen_proxy.api_keys, queen_proxy.users TO queen_proxy_app;
    GRANT SELECT, INSERT ON queen_proxy.operations TO queen_proxy_app;
    GRANT USAGE ON SEQUENCE queen_proxy.operations_id_seq TO queen_proxy_app;
    IF NOT pg_has_role(current_user, 'queen_proxy_app', can_set) THEN
        BEGIN
            EXECUTE format('GRANT queen_proxy_app TO %I', current_user);
        EXCEPTION WHEN insufficient_privilege OR invalid_grant_operation THEN
            RAISE NOTICE 'role % may not take role queen_proxy_app', current_user;
        END;
    END IF;
END
$$;

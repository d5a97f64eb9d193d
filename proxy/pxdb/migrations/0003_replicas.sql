-- What several proxies on one control plane must agree on: sessions that can be ended, disabled
-- users, sign-in failures and API key usage.

-- A sign-in is a row; the session token names it. Signing out, disabling the user or deleting it
-- ends the session on every proxy at its next request.
CREATE TABLE queen_proxy.sessions (
    id         uuid PRIMARY KEY,
    user_name  text NOT NULL REFERENCES queen_proxy.users (name) ON DELETE CASCADE,
    address    text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    revoked_at timestamptz
);
CREATE INDEX sessions_user ON queen_proxy.sessions (user_name);

ALTER TABLE queen_proxy.users ADD COLUMN disabled_at timestamptz;

-- Sessions are cached like keys (proxy/sessioncache.go): an ended session or a changed user is
-- announced like a revoked key. A new session is not, as no proxy has it cached.
CREATE TRIGGER sessions_changed
    AFTER UPDATE OR DELETE ON queen_proxy.sessions
    FOR EACH STATEMENT EXECUTE FUNCTION queen_proxy.announce_change();
CREATE TRIGGER users_changed
    AFTER UPDATE OR DELETE ON queen_proxy.users
    FOR EACH STATEMENT EXECUTE FUNCTION queen_proxy.announce_change();

-- Failed sign-ins per subject ('user:<name>' or 'address:<ip>') in the window that began at
-- window_start (proxy/signin.go).
CREATE TABLE queen_proxy.sign_in_failures (
    subject      text PRIMARY KEY,
    window_start timestamptz NOT NULL,
    failures     integer NOT NULL
);

-- Requests each API key made per UTC day, summed over every proxy: each adds what it admitted
-- a few times a second and learns the others' from the total (proxy/limits.go).
CREATE TABLE queen_proxy.key_usage (
    key_id   uuid NOT NULL REFERENCES queen_proxy.api_keys (id) ON DELETE CASCADE,
    day      date NOT NULL,
    requests bigint NOT NULL,
    PRIMARY KEY (key_id, day)
);

DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'queen_proxy_app') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON queen_proxy.sessions, queen_proxy.sign_in_failures,
            queen_proxy.key_usage TO queen_proxy_app;
    END IF;
END
$$;

-- A change to the keys or the cells is announced on the channel queen_proxy_changes, so every
-- proxy empties its key cache and re-reads its cells at once (proxy/keycache.go): a key revoked
-- by the CLI or another proxy is refused on its next request. Statement-level: one
-- notification per statement, and PostgreSQL folds identical ones within a transaction.
CREATE FUNCTION queen_proxy.announce_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('queen_proxy_changes', TG_TABLE_NAME);
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION queen_proxy.announce_change() FROM PUBLIC;

CREATE TRIGGER api_keys_changed
    AFTER INSERT OR UPDATE OR DELETE ON queen_proxy.api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION queen_proxy.announce_change();
CREATE TRIGGER cells_changed
    AFTER INSERT OR UPDATE OR DELETE ON queen_proxy.cells
    FOR EACH STATEMENT EXECUTE FUNCTION queen_proxy.announce_change();

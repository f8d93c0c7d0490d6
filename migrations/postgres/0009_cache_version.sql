-- Issue 12 §3: a counter every change to tokens, users, memberships or webhooks bumps in its own
-- transaction, so that each process's read cache learns of changes made by others.
-- A token's last_used_at is not such a change (it decides nothing). Row triggers, so that a
-- statement that changes no row (a replayed OTP step, a second revocation) bumps nothing.
CREATE TABLE cache_version (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version BIGINT NOT NULL
);
INSERT INTO cache_version (id, version) VALUES (1, 0);

CREATE FUNCTION bump_cache_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cache_version SET version = version + 1 WHERE id = 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER cache_version_users AFTER UPDATE OR DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION bump_cache_version();
CREATE TRIGGER cache_version_tokens AFTER UPDATE OF id, token_hash, user_id, kind, label, scopes,
    created_at, expires_at, revoked_at, ip, ip_restrict, enterprise, is_extensible, admin, spending_limits,
    permitted_wallets, permitted_enterprises, origin, parent_id, unlock_time, unlock_expires
    OR DELETE ON access_tokens
    FOR EACH ROW EXECUTE FUNCTION bump_cache_version();
CREATE TRIGGER cache_version_members AFTER INSERT OR UPDATE OR DELETE ON enterprise_users
    FOR EACH ROW EXECUTE FUNCTION bump_cache_version();

-- Webhooks: which exist and which are active decide an event's fan-out (failure counters do not).
CREATE TRIGGER cache_version_webhooks AFTER INSERT OR UPDATE OF state OR DELETE ON webhooks
    FOR EACH ROW EXECUTE FUNCTION bump_cache_version();

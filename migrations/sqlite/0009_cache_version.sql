-- Issue 12 §3: a counter every change to tokens, users, memberships or webhooks bumps in its own
-- transaction, so that each process's read cache learns of changes made by others.
-- A token's last_used_at is not such a change (it decides nothing).
CREATE TABLE cache_version (
    id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
    version INTEGER NOT NULL
);
INSERT INTO cache_version (id, version) VALUES (1, 0);

CREATE TRIGGER cache_version_users_update AFTER UPDATE ON users
BEGIN UPDATE cache_version SET version = version + 1 WHERE id = 1; END;
CREATE TRIGGER cache_version_users_delete AFTER DELETE ON users
BEGIN UPDATE cache_version SET version = version + 1 WHERE id = 1; END;

CREATE TRIGGER cache_version_tokens_update AFTER UPDATE OF id, token_hash, user_id, kind, label, scopes,
    created_at, expires_at, revoked_at, ip, ip_restrict, enterprise, is_extensible, admin, spending_limits,
    permitted_wallets, permitted_enterprises, origin, parent_id, unlock_time, unlock_expires ON access_tokens
BEGIN UPDATE cache_version SET version = version + 1 WHERE id = 1; END;
CREATE TRIGGER cache_version_tokens_delete AFTER DELETE ON access_tokens
BEGIN UPDATE cache_version SET version = version + 1 WHERE id = 1; END;

CREATE TRIGGER cache_version_members_insert AFTER INSERT ON enterprise_users
BEGIN UPDATE cache_version SET version = version + 1 WHERE id = 1; END;
CREATE TRIGGER cache_version_members_update AFTER UPDATE ON enterprise_users
BEGIN UPDATE cache_version SET version = version + 1 WHERE id = 1; END;
CREATE TRIGGER cache_version_members_delete AFTER DELETE ON enterprise_users
BEGIN UPDATE cache_version SET version = version + 1 WHERE id = 1; END;

-- Webhooks: which exist and which are active decide an event's fan-out (failure counters do not).
CREATE TRIGGER cache_version_webhooks_insert AFTER INSERT ON webhooks
BEGIN UPDATE cache_version SET version = version + 1 WHERE id = 1; END;
CREATE TRIGGER cache_version_webhooks_update AFTER UPDATE OF state ON webhooks
BEGIN UPDATE cache_version SET version = version + 1 WHERE id = 1; END;
CREATE TRIGGER cache_version_webhooks_delete AFTER DELETE ON webhooks
BEGIN UPDATE cache_version SET version = version + 1 WHERE id = 1; END;

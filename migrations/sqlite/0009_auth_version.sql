-- Issue 12 §3: a counter every change to tokens, users or memberships bumps in its own
-- transaction, so that each process's authentication cache learns of changes made by others.
-- A token's last_used_at is not such a change (it decides nothing).
CREATE TABLE auth_version (
    id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
    version INTEGER NOT NULL
);
INSERT INTO auth_version (id, version) VALUES (1, 0);

CREATE TRIGGER auth_version_users_update AFTER UPDATE ON users
BEGIN UPDATE auth_version SET version = version + 1 WHERE id = 1; END;
CREATE TRIGGER auth_version_users_delete AFTER DELETE ON users
BEGIN UPDATE auth_version SET version = version + 1 WHERE id = 1; END;

CREATE TRIGGER auth_version_tokens_update AFTER UPDATE OF id, token_hash, user_id, kind, label, scopes,
    created_at, expires_at, revoked_at, ip, ip_restrict, enterprise, is_extensible, admin, spending_limits,
    permitted_wallets, permitted_enterprises, origin, parent_id, unlock_time, unlock_expires ON access_tokens
BEGIN UPDATE auth_version SET version = version + 1 WHERE id = 1; END;
CREATE TRIGGER auth_version_tokens_delete AFTER DELETE ON access_tokens
BEGIN UPDATE auth_version SET version = version + 1 WHERE id = 1; END;

CREATE TRIGGER auth_version_members_insert AFTER INSERT ON enterprise_users
BEGIN UPDATE auth_version SET version = version + 1 WHERE id = 1; END;
CREATE TRIGGER auth_version_members_update AFTER UPDATE ON enterprise_users
BEGIN UPDATE auth_version SET version = version + 1 WHERE id = 1; END;
CREATE TRIGGER auth_version_members_delete AFTER DELETE ON enterprise_users
BEGIN UPDATE auth_version SET version = version + 1 WHERE id = 1; END;

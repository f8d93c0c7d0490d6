-- Users, enterprises, access tokens, token templates, login failure counters.
CREATE TABLE users (
    id TEXT PRIMARY KEY NOT NULL,
    email TEXT NOT NULL UNIQUE,
    name_first TEXT NOT NULL DEFAULT '',
    name_last TEXT NOT NULL DEFAULT '',
    password_hash TEXT NOT NULL,
    totp_secret_enc BLOB NOT NULL,
    totp_last_step INTEGER,
    service_admin INTEGER NOT NULL DEFAULT 0,
    is_active INTEGER NOT NULL DEFAULT 1,
    timezone TEXT NOT NULL DEFAULT 'UTC',
    locale TEXT NOT NULL DEFAULT 'en-US',
    allowed_coins TEXT NOT NULL DEFAULT '[]',
    created_at INTEGER NOT NULL,
    password_updated_at INTEGER NOT NULL,
    last_login INTEGER
);

CREATE TABLE enterprises (
    id TEXT PRIMARY KEY NOT NULL,
    name TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE TABLE enterprise_users (
    enterprise_id TEXT NOT NULL REFERENCES enterprises(id),
    user_id TEXT NOT NULL REFERENCES users(id),
    is_admin INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (enterprise_id, user_id)
);
CREATE INDEX enterprise_users_user ON enterprise_users(user_id);

CREATE TABLE access_tokens (
    id TEXT PRIMARY KEY NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    user_id TEXT NOT NULL REFERENCES users(id),
    kind TEXT NOT NULL,
    label TEXT,
    scopes TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    revoked_at INTEGER,
    ip TEXT,
    ip_restrict TEXT,
    enterprise TEXT,
    is_extensible INTEGER NOT NULL DEFAULT 0,
    admin INTEGER NOT NULL DEFAULT 0,
    spending_limits TEXT,
    permitted_wallets TEXT,
    permitted_enterprises TEXT,
    origin TEXT NOT NULL,
    parent_id TEXT
);
CREATE INDEX access_tokens_user ON access_tokens(user_id);

CREATE TABLE token_templates (
    id TEXT PRIMARY KEY NOT NULL,
    fields TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE TABLE login_failures (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    email TEXT NOT NULL,
    ip TEXT NOT NULL,
    at INTEGER NOT NULL
);
CREATE INDEX login_failures_email ON login_failures(email, at);
CREATE INDEX login_failures_ip ON login_failures(ip, at);

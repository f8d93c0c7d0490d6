-- Users, enterprises, access tokens, token templates, login failure counters.
CREATE TABLE users (
    id TEXT PRIMARY KEY NOT NULL,
    email TEXT NOT NULL UNIQUE,
    name_first TEXT NOT NULL DEFAULT '',
    name_last TEXT NOT NULL DEFAULT '',
    password_hash TEXT NOT NULL,
    totp_secret_enc BYTEA NOT NULL,
    totp_last_step BIGINT,
    service_admin BOOLEAN NOT NULL DEFAULT FALSE,
    is_active BOOLEAN NOT NULL DEFAULT TRUE,
    timezone TEXT NOT NULL DEFAULT 'UTC',
    locale TEXT NOT NULL DEFAULT 'en-US',
    allowed_coins TEXT NOT NULL DEFAULT '[]',
    created_at BIGINT NOT NULL,
    password_updated_at BIGINT NOT NULL,
    last_login BIGINT
);

CREATE TABLE enterprises (
    id TEXT PRIMARY KEY NOT NULL,
    name TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE enterprise_users (
    enterprise_id TEXT NOT NULL REFERENCES enterprises(id),
    user_id TEXT NOT NULL REFERENCES users(id),
    is_admin BOOLEAN NOT NULL DEFAULT FALSE,
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
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    revoked_at BIGINT,
    ip TEXT,
    ip_restrict TEXT,
    enterprise TEXT,
    is_extensible BOOLEAN NOT NULL DEFAULT FALSE,
    admin BOOLEAN NOT NULL DEFAULT FALSE,
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
    created_at BIGINT NOT NULL
);

CREATE TABLE login_failures (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email TEXT NOT NULL,
    ip TEXT NOT NULL,
    at BIGINT NOT NULL
);
CREATE INDEX login_failures_email ON login_failures(email, at);
CREATE INDEX login_failures_ip ON login_failures(ip, at);

-- OAuth 2.0 (RFC 6749, PKCE RFC 7636): registered applications, the grants users gave them
-- (one per authorization: its code, its refresh tokens and the access tokens they issued), the
-- codes and refresh tokens by their SHA-256 only.
CREATE TABLE oauth_clients (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    secret_hash TEXT,
    redirect_uris TEXT NOT NULL,
    scopes TEXT NOT NULL,
    disabled BOOLEAN NOT NULL DEFAULT FALSE,
    created_at BIGINT NOT NULL
);

CREATE TABLE oauth_grants (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    client_id TEXT NOT NULL,
    scopes TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    last_used_at BIGINT,
    revoked_at BIGINT
);
CREATE INDEX oauth_grants_by_user ON oauth_grants (user_id, client_id);

CREATE TABLE oauth_codes (
    code_hash TEXT PRIMARY KEY,
    grant_id TEXT NOT NULL,
    redirect_uri TEXT,
    code_challenge TEXT,
    nonce TEXT,
    auth_time BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    used_at BIGINT
);

CREATE TABLE oauth_refresh_tokens (
    token_hash TEXT PRIMARY KEY,
    grant_id TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    used_at BIGINT
);
CREATE INDEX oauth_refresh_tokens_by_grant ON oauth_refresh_tokens (grant_id);

ALTER TABLE access_tokens ADD COLUMN oauth_grant_id TEXT;
CREATE INDEX access_tokens_by_oauth_grant ON access_tokens (oauth_grant_id);

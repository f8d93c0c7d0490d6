-- Single sign-on (docs/sso.md). An enterprise's identity provider: `provider` okta, msEntra or
-- oidc; `client_secret` sealed under the master key (hex); `settings` JSON {oktaDomain,
-- tenantId, scopes, groupsClaim, groupRoles}.
CREATE TABLE enterprise_sso (
    enterprise_id TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    issuer TEXT NOT NULL,
    client_id TEXT NOT NULL,
    client_secret TEXT NOT NULL,
    settings TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);
-- A person at a provider (`iss`, `sub`) linked to a user, for good.
CREATE TABLE sso_identities (
    issuer TEXT NOT NULL,
    subject TEXT NOT NULL,
    user_id TEXT NOT NULL,
    enterprise_id TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (issuer, subject)
);
CREATE INDEX sso_identities_by_user ON sso_identities (user_id);
-- Sign-ins gone to a provider and not back: keyed by the SHA-256 of their `state`, bound to the
-- browser by the SHA-256 of its cookie; the PKCE verifier sealed (hex); `link_user`: the user of
-- the signed-in session that asked to link their account to the provider. Taken once.
CREATE TABLE sso_logins (
    state_hash TEXT PRIMARY KEY,
    enterprise_id TEXT NOT NULL,
    browser_hash TEXT NOT NULL,
    nonce TEXT NOT NULL,
    verifier TEXT NOT NULL,
    next TEXT NOT NULL,
    link_user TEXT,
    expires_at BIGINT NOT NULL
);
CREATE INDEX sso_logins_by_expiry ON sso_logins (expires_at);

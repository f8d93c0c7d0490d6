-- OpenID Connect: the keys id_tokens are signed with (the private key sealed under the master
-- key; a retired key stays in the JWKS until what it signed has expired), the algorithm each
-- client takes, and how and when the user of a grant signed in (amr, auth_time).
CREATE TABLE oidc_keys (
    kid TEXT PRIMARY KEY,
    alg TEXT NOT NULL,
    sealed TEXT NOT NULL,
    public_jwk TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    retired_at BIGINT
);
ALTER TABLE oauth_clients ADD COLUMN id_token_alg TEXT NOT NULL DEFAULT 'ES256';
ALTER TABLE oauth_grants ADD COLUMN amr TEXT NOT NULL DEFAULT '[]';
ALTER TABLE oauth_grants ADD COLUMN auth_time BIGINT NOT NULL DEFAULT 0;

-- Users' passkeys (WebAuthn credentials): the credential as webauthn-rs keeps it (public key,
-- signature counter; nothing secret), and its label and uses.
CREATE TABLE passkeys (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    credential_id TEXT NOT NULL UNIQUE,
    label TEXT NOT NULL,
    credential TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    last_used_at INTEGER
);
CREATE INDEX passkeys_by_user ON passkeys (user_id);

-- Ceremonies begun and not yet answered: each challenge is answered once, before it expires.
CREATE TABLE webauthn_challenges (
    challenge TEXT PRIMARY KEY,
    purpose TEXT NOT NULL,
    user_id TEXT,
    state TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX webauthn_challenges_by_expiry ON webauthn_challenges (expires_at);

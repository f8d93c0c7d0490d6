-- Issue 20 §1: HMAC authentication. The HMAC key is the token itself, so each new token's value
-- is kept sealed under the master key (XChaCha20-Poly1305, bound to the token id); a database
-- copy without the key file can sign nothing. Tokens made before have none: Bearer only.
ALTER TABLE access_tokens ADD COLUMN sealed_value BYTEA;

-- The replay guard for signed requests that change state: one row per HMAC seen, kept until its
-- timestamp leaves the window.
CREATE TABLE signed_requests (
    hmac TEXT PRIMARY KEY NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX signed_requests_expiry ON signed_requests (expires_at);

-- PKCE is required of every client (RFC 9700 §2.1.1); a confidential client registered with
-- `--pkce-optional` may leave it out, for BitGoJS's authenticateWithAuthCode, which sends no
-- code_verifier.
ALTER TABLE oauth_clients ADD COLUMN pkce_optional BOOLEAN NOT NULL DEFAULT FALSE;

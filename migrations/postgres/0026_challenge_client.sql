-- The client (an IPv4 address or an IPv6 /64) that asked for each waiting WebAuthn challenge:
-- one client may hold only `passkeys.max_pending_per_client` of them.
ALTER TABLE webauthn_challenges ADD COLUMN client TEXT NOT NULL DEFAULT '';
CREATE INDEX webauthn_challenges_by_client ON webauthn_challenges (client);

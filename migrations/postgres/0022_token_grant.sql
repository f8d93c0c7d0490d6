-- How a token's session was granted (the login result's grant_type), and the BIP32 path its
-- value was handed over under when it was ECDH-encrypted (BitGo's token issuance).
ALTER TABLE access_tokens ADD COLUMN grant_type TEXT NOT NULL DEFAULT 'password';
ALTER TABLE access_tokens ADD COLUMN derivation_path TEXT;

-- Keys the service holds for itself, sealed under the master key (hex of nonce, ciphertext and
-- tag): `ecdh`, the BIP32 key BitGoJS's token issuance derives secrets with (its xpub is the
-- SDK's `serverXpub`). Made once, by whichever process first needs it.
CREATE TABLE server_keys (
    name TEXT PRIMARY KEY NOT NULL,
    sealed TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

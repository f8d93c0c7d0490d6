-- Multisig wallets of UTXO coins (docs/chains.md#utxo-chains). A keychain is an extended public
-- key (BIP 32, base58) BitGo's keychain routes take: no private part is kept. `wallet_id` is the
-- wallet that names it, once one does.
CREATE TABLE keychains (
    id TEXT PRIMARY KEY NOT NULL,
    coin TEXT NOT NULL,
    pub TEXT NOT NULL,
    source TEXT NOT NULL,
    user_id TEXT NOT NULL,
    wallet_id TEXT,
    created_at BIGINT NOT NULL
);
CREATE INDEX keychains_by_user ON keychains(user_id, created_at);
-- A derived address: its BitGo chain code and index, and coinSpecific (JSON: outputScript,
-- redeemScript, witnessScript). One address per (wallet, chain code, index).
ALTER TABLE wallet_addresses ADD COLUMN chain_code INTEGER;
ALTER TABLE wallet_addresses ADD COLUMN address_index BIGINT;
ALTER TABLE wallet_addresses ADD COLUMN coin_specific TEXT;
CREATE UNIQUE INDEX wallet_addresses_derived ON wallet_addresses(wallet_id, chain_code, address_index);

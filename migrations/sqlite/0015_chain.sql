-- The chain watcher (docs/chains.md). Addresses are EIP-55 text; hashes 0x + 64 hex; amounts
-- base units as decimal digits; times Unix seconds unless named _ms.
CREATE TABLE wallet_addresses (
    chain TEXT NOT NULL,
    address TEXT NOT NULL,
    wallet_id TEXT NOT NULL,
    label TEXT,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (chain, address)
);
CREATE INDEX wallet_addresses_wallet ON wallet_addresses(wallet_id, address);
-- The last reorg_depth block headers of each chain, to find a reorg's common ancestor.
CREATE TABLE chain_heads (
    chain TEXT NOT NULL,
    height INTEGER NOT NULL,
    hash TEXT NOT NULL,
    parent_hash TEXT NOT NULL,
    PRIMARY KEY (chain, height)
);
-- A chain's checkpoint (the last block processed), its watcher's lease, and its alarms.
CREATE TABLE chain_state (
    chain TEXT PRIMARY KEY NOT NULL,
    height INTEGER,
    hash TEXT,
    node_head INTEGER,
    halted TEXT,
    last_reorg_depth INTEGER,
    last_reorg_at INTEGER,
    lease_holder TEXT,
    lease_until_ms INTEGER
);
-- A transaction's effect on one wallet for one coin; id derived from (coin, txid, wallet).
CREATE TABLE transfers (
    id TEXT PRIMARY KEY NOT NULL,
    wallet_id TEXT NOT NULL,
    coin TEXT NOT NULL,
    chain TEXT NOT NULL,
    txid TEXT NOT NULL,
    height INTEGER NOT NULL,
    block_hash TEXT NOT NULL,
    state TEXT NOT NULL,
    value TEXT NOT NULL,
    fee TEXT NOT NULL,
    entries TEXT NOT NULL,
    date INTEGER NOT NULL,
    confirmations INTEGER NOT NULL,
    sender TEXT NOT NULL,
    nonce INTEGER NOT NULL,
    seen_ms INTEGER NOT NULL
);
CREATE INDEX transfers_wallet ON transfers(wallet_id, seen_ms, id);
CREATE INDEX transfers_chain ON transfers(chain, height);

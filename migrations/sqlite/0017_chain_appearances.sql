-- The first block in which each watched address appeared on chain (a transfer from or to it, or
-- its contract's creation): `address_confirmation` and `wallet_confirmation` are sent once, when
-- a row is made here. A reorg below `height` deletes the row.
CREATE TABLE chain_appearances (
    chain TEXT NOT NULL,
    address TEXT NOT NULL,
    wallet_id TEXT NOT NULL,
    height INTEGER NOT NULL,
    txid TEXT NOT NULL,
    PRIMARY KEY (chain, address)
);
CREATE INDEX chain_appearances_height ON chain_appearances(chain, height);
-- A wallet's transfers are listed by block, newest first (several blocks are written at once
-- while catching up, so the time a transfer was stored does not order them).
DROP INDEX transfers_wallet;
CREATE INDEX transfers_wallet_height ON transfers(wallet_id, height, id);

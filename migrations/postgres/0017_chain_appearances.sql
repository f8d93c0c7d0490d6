-- The first block in which each watched address appeared on chain (a transfer from or to it, or
-- its contract's creation): `address_confirmation` and `wallet_confirmation` are sent once, when
-- a row is made here. A reorg below `height` deletes the row.
CREATE TABLE chain_appearances (
    chain TEXT NOT NULL,
    address TEXT NOT NULL,
    wallet_id TEXT NOT NULL,
    height BIGINT NOT NULL,
    txid TEXT NOT NULL,
    PRIMARY KEY (chain, address)
);
CREATE INDEX chain_appearances_height ON chain_appearances(chain, height);
-- A wallet's transfers are listed by block, newest first (several blocks are written at once
-- while catching up, so the time a transfer was stored does not order them).
DROP INDEX transfers_wallet;
CREATE INDEX transfers_wallet_height ON transfers(wallet_id, height, id);
-- A wallet's fee alerts (`custodian wallet fee-alerts`): thresholds in base units (wei), NULL
-- when off. `lowFee` compares the average base fee of the last 10 blocks, `lowFeeAddressBalance`
-- the balance of the record's `coinSpecific.feeAddress`.
CREATE TABLE wallet_fee_alerts (
    wallet_id TEXT PRIMARY KEY NOT NULL,
    low_fee TEXT,
    low_fee_address_balance TEXT,
    updated_at BIGINT NOT NULL
);
-- From here on wallets.updated_at is written in milliseconds (it was seconds): the chain
-- watcher's address book notices a record changed twice within one second.
-- A chain wallet's ERC-20 balances, one row per token coin, from `balanceOf` summed over its
-- addresses (base units as decimal digits).
CREATE TABLE wallet_token_balances (
    wallet_id TEXT NOT NULL,
    coin TEXT NOT NULL,
    balance TEXT NOT NULL,
    confirmed_balance TEXT NOT NULL,
    spendable_balance TEXT NOT NULL,
    PRIMARY KEY (wallet_id, coin)
);

-- Wallet records (§2.1): the JSON record plus the columns the lookup filters on; balances in
-- base units as decimal strings.
CREATE TABLE wallets (
    id TEXT PRIMARY KEY NOT NULL,
    coin TEXT NOT NULL,
    enterprise TEXT,
    deleted BOOLEAN NOT NULL DEFAULT FALSE,
    user_ids TEXT NOT NULL DEFAULT '',
    record TEXT NOT NULL,
    balance TEXT,
    confirmed_balance TEXT,
    spendable_balance TEXT,
    staking_balance TEXT,
    reward_balance TEXT,
    withdraw_hold_usd TEXT,
    updated_at BIGINT NOT NULL
);
CREATE INDEX wallets_enterprise ON wallets(enterprise);

-- The USD circuit breaker (docs/policy.md#circuit-breaker).
-- A withdrawal's value when it was made: whole US cents (at most 10^14), and the price used (USD
-- per whole coin, decimal). NULL when its coin has no price source.
ALTER TABLE withdrawals ADD COLUMN usd_cents BIGINT;
ALTER TABLE withdrawals ADD COLUMN usd_rate TEXT;
-- What a window lost to rejections, cancellations and failures.
CREATE INDEX withdrawals_usd_uncounted ON withdrawals (wallet_id, created_at)
    WHERE state IN ('rejected', 'canceled', 'failed') AND usd_cents IS NOT NULL;
-- Cents each wallet sent per minute (Unix seconds / 60), written under the wallet's lock with the
-- withdrawal: a rolling 24 hours is at most 1,441 rows however many withdrawals it holds.
CREATE TABLE usd_minutes (
    wallet_id TEXT NOT NULL,
    minute BIGINT NOT NULL,
    cents BIGINT NOT NULL,
    PRIMARY KEY (wallet_id, minute)
);
-- Wallets whose breaker is tripped: since when, and the 24-hour total (cents) that tripped it.
CREATE TABLE circuit_breakers (
    wallet_id TEXT PRIMARY KEY,
    coin TEXT NOT NULL,
    tripped_at BIGINT NOT NULL,
    usd_cents BIGINT NOT NULL
);
CREATE INDEX circuit_breakers_coin ON circuit_breakers (coin);
-- Prices an operator set (`custodian price set`): USD per whole coin, decimal.
CREATE TABLE prices (
    coin TEXT PRIMARY KEY,
    usd TEXT NOT NULL,
    set_at BIGINT NOT NULL
);

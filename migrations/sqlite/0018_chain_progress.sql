-- A chain's speed and its watcher's last fault, for `/health`, `custodian chain status` and the
-- console's Chains page (docs/chains.md): blocks processed per second over the last few
-- seconds (thousandths), and why the last round failed (cleared by the next that succeeds).
ALTER TABLE chain_state ADD COLUMN blocks_per_s_milli INTEGER;
ALTER TABLE chain_state ADD COLUMN last_error TEXT;
-- Wallets whose balances a backfill changed while too far behind the node's head to read them
-- (a full node keeps only its latest states): read at the first block near the head, and kept
-- here so that a process restarted mid-backfill still reads them.
CREATE TABLE chain_stale_balances (
    chain TEXT NOT NULL,
    wallet_id TEXT NOT NULL,
    coin TEXT NOT NULL,
    PRIMARY KEY (chain, wallet_id, coin)
);

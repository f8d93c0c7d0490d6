-- A chain's speed and its watcher's last fault, for `/health`, `custodian chain status` and the
-- console's Chains page (docs/chains.md): blocks processed per second over the last few
-- seconds (thousandths), and why the last round failed (cleared by the next that succeeds).
ALTER TABLE chain_state ADD COLUMN blocks_per_s_milli BIGINT;
ALTER TABLE chain_state ADD COLUMN last_error TEXT;

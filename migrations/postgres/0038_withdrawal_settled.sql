-- A withdrawal is settled once the chain watcher records the send of one of its transactions
-- `confirmed` (in the same write as the wallet's confirmed balance): from then on that balance
-- holds what it spent, and admission no longer counts it in flight (docs/withdrawals.md).
-- Cleared again if a deep reorg takes the confirmed send away. Withdrawals mined before this
-- column existed are taken as settled.
ALTER TABLE withdrawals ADD COLUMN settled BIGINT NOT NULL DEFAULT 0;
UPDATE withdrawals SET settled = 1 WHERE mined_block IS NOT NULL;

-- Policy rules (docs/policy.md). A pending approval decides a withdrawal (`transactionRequest`,
-- `tx_request_id`) or a loosening rule change (`policyRuleRequest`, `info`: JSON {action, ruleId,
-- update, before}). `policy`: what the rules made of a withdrawal at initiation, JSON
-- {singleRunResults, reasons, ruleApprovals}.
ALTER TABLE pending_approvals ALTER COLUMN tx_request_id DROP NOT NULL;
ALTER TABLE pending_approvals ADD COLUMN policy TEXT;
ALTER TABLE pending_approvals ADD COLUMN approval_type TEXT NOT NULL DEFAULT 'transactionRequest';
ALTER TABLE pending_approvals ADD COLUMN info TEXT;
-- A withdrawal's total in 32-bit words, least significant first: what a window lost to
-- rejections is summed in SQL, exactly, on both databases (BIGINT sums of 32-bit words cannot
-- overflow below 2^31 rows). NULL for withdrawals made before this version, whose `recipients`
-- are summed.
ALTER TABLE withdrawals ADD COLUMN amount_w0 BIGINT;
ALTER TABLE withdrawals ADD COLUMN amount_w1 BIGINT;
ALTER TABLE withdrawals ADD COLUMN amount_w2 BIGINT;
ALTER TABLE withdrawals ADD COLUMN amount_w3 BIGINT;
ALTER TABLE withdrawals ADD COLUMN amount_w4 BIGINT;
ALTER TABLE withdrawals ADD COLUMN amount_w5 BIGINT;
ALTER TABLE withdrawals ADD COLUMN amount_w6 BIGINT;
ALTER TABLE withdrawals ADD COLUMN amount_w7 BIGINT;
-- The velocity ledger of each (wallet, coin moved): `vseq` counts its withdrawals in the order
-- they were stored (under the wallet's lock), `vtime` is `created_at` made never to go back
-- along `vseq`, and `cum_total` is the decimal sum of every amount up to and including this
-- one. A window's sum is two index reads: the latest `cum_total` less the last one before the
-- window, less what was rejected, canceled or failed in it. NULL before this version.
ALTER TABLE withdrawals ADD COLUMN vcoin TEXT;
ALTER TABLE withdrawals ADD COLUMN vseq BIGINT;
ALTER TABLE withdrawals ADD COLUMN vtime BIGINT;
ALTER TABLE withdrawals ADD COLUMN cum_total TEXT;
CREATE INDEX withdrawals_velocity ON withdrawals (wallet_id, vcoin, vtime, vseq);
CREATE INDEX withdrawals_velocity_uncounted ON withdrawals (wallet_id, vcoin, vtime)
    WHERE state IN ('rejected', 'canceled', 'failed');
CREATE INDEX withdrawals_velocity_legacy ON withdrawals (wallet_id) WHERE cum_total IS NULL;
-- Enterprise policy rules (docs/policy.md#enterprise-rules): the JSON array of an enterprise's
-- rules for one coin, as `admin.policy.rules` holds a wallet's; each applies to every wallet of
-- the enterprise and coin. Changed by compare-and-swap of `rules`.
CREATE TABLE enterprise_policies (
    enterprise_id TEXT NOT NULL,
    coin TEXT NOT NULL,
    rules TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (enterprise_id, coin)
);

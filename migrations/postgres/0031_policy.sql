-- Policy rules (docs/policy.md). A pending approval decides a withdrawal (`transactionRequest`,
-- `tx_request_id`) or a loosening rule change (`policyRuleRequest`, `info`: JSON {action, ruleId,
-- update, before}). `policy`: what the rules made of a withdrawal at initiation, JSON
-- {singleRunResults, reasons, ruleApprovals}.
ALTER TABLE pending_approvals ALTER COLUMN tx_request_id DROP NOT NULL;
ALTER TABLE pending_approvals ADD COLUMN policy TEXT;
ALTER TABLE pending_approvals ADD COLUMN approval_type TEXT NOT NULL DEFAULT 'transactionRequest';
ALTER TABLE pending_approvals ADD COLUMN info TEXT;
-- A withdrawal's total in 32-bit words, least significant first: a velocity limit's window is
-- summed in SQL, exactly, on both databases (BIGINT sums of 32-bit words cannot overflow below
-- 2^31 rows). NULL for withdrawals made before this version, whose `recipients` are summed.
ALTER TABLE withdrawals ADD COLUMN amount_w0 BIGINT;
ALTER TABLE withdrawals ADD COLUMN amount_w1 BIGINT;
ALTER TABLE withdrawals ADD COLUMN amount_w2 BIGINT;
ALTER TABLE withdrawals ADD COLUMN amount_w3 BIGINT;
ALTER TABLE withdrawals ADD COLUMN amount_w4 BIGINT;
ALTER TABLE withdrawals ADD COLUMN amount_w5 BIGINT;
ALTER TABLE withdrawals ADD COLUMN amount_w6 BIGINT;
ALTER TABLE withdrawals ADD COLUMN amount_w7 BIGINT;

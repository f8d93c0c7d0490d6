-- Policy rules (docs/policy.md). A pending approval decides a withdrawal (`transactionRequest`,
-- `tx_request_id`) or a loosening rule change (`policyRuleRequest`, `info`: JSON {action, ruleId,
-- update, before}); SQLite cannot drop a NOT NULL, so the table is made again. `policy`: what the
-- rules made of a withdrawal at initiation, JSON {singleRunResults, reasons, ruleApprovals}.
CREATE TABLE pending_approvals_new (
    id TEXT PRIMARY KEY,
    wallet_id TEXT NOT NULL,
    coin TEXT NOT NULL,
    enterprise TEXT,
    creator TEXT NOT NULL,
    state TEXT NOT NULL,
    approvals_required BIGINT NOT NULL,
    resolvers TEXT NOT NULL,
    tx_request_id TEXT,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    policy TEXT,
    approval_type TEXT NOT NULL DEFAULT 'transactionRequest',
    info TEXT
);
INSERT INTO pending_approvals_new (id, wallet_id, coin, enterprise, creator, state, approvals_required,
    resolvers, tx_request_id, created_at, expires_at)
    SELECT id, wallet_id, coin, enterprise, creator, state, approvals_required, resolvers, tx_request_id,
    created_at, expires_at FROM pending_approvals;
DROP TABLE pending_approvals;
ALTER TABLE pending_approvals_new RENAME TO pending_approvals;
CREATE INDEX pending_approvals_by_wallet ON pending_approvals (wallet_id, created_at);
CREATE INDEX pending_approvals_by_state ON pending_approvals (state, expires_at);
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

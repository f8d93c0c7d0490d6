-- Approvals of an enterprise's policy changes (docs/policy.md#enterprise-rules): such an approval
-- belongs to the enterprise (`enterprise`), not to one wallet, so `wallet_id` is NULL. SQLite
-- cannot drop a NOT NULL, so the table is made again.
CREATE TABLE pending_approvals_new (
    id TEXT PRIMARY KEY,
    wallet_id TEXT,
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
    resolvers, tx_request_id, created_at, expires_at, policy, approval_type, info)
    SELECT id, wallet_id, coin, enterprise, creator, state, approvals_required, resolvers, tx_request_id,
    created_at, expires_at, policy, approval_type, info FROM pending_approvals;
DROP TABLE pending_approvals;
ALTER TABLE pending_approvals_new RENAME TO pending_approvals;
CREATE INDEX pending_approvals_by_wallet ON pending_approvals (wallet_id, created_at);
CREATE INDEX pending_approvals_by_state ON pending_approvals (state, expires_at);
CREATE INDEX pending_approvals_by_enterprise ON pending_approvals (enterprise, created_at);

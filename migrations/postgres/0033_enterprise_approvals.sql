-- Approvals of an enterprise's policy changes (docs/policy.md#enterprise-rules): such an approval
-- belongs to the enterprise (`enterprise`), not to one wallet, so `wallet_id` is NULL.
ALTER TABLE pending_approvals ALTER COLUMN wallet_id DROP NOT NULL;
CREATE INDEX pending_approvals_by_enterprise ON pending_approvals (enterprise, created_at);

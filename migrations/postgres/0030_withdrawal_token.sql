-- The access token that started each withdrawal: a session's unlock reports the withdrawals
-- it made (txCount, txValue; docs/withdrawals.md). NULL for withdrawals made before it was kept.
ALTER TABLE withdrawals ADD COLUMN token_id TEXT;
CREATE INDEX withdrawals_by_token ON withdrawals (token_id, created_at);

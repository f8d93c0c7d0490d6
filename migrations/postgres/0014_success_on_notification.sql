-- Issue 23 §3 (lean storage): a notification's successful attempt is kept on the notification
-- (its start, duration, status and the first 256 bytes of the response body) instead of a
-- delivery_attempts row with three index entries: about 210 bytes less per delivered event.
-- delivery_attempts keeps failed attempts, and a success that a later success replaced (a
-- resend). Rows written before this migration stay where they are; reads merge both.
ALTER TABLE notifications ADD COLUMN delivered_at BIGINT;      -- ms, the attempt's start
ALTER TABLE notifications ADD COLUMN delivered_ms BIGINT;      -- its duration
ALTER TABLE notifications ADD COLUMN delivered_status BIGINT;
ALTER TABLE notifications ADD COLUMN delivered_body TEXT;
-- When each webhook was last delivered to (ms, attempt start; written at most once a second):
-- the console's "last delivered" without an index of successes.
ALTER TABLE webhooks ADD COLUMN last_delivered_at BIGINT;
UPDATE webhooks SET last_delivered_at =
    (SELECT MAX(started_at) FROM delivery_attempts a WHERE a.webhook_id = webhooks.id AND a.success);
-- Most events have no transfer id: only those that do are indexed.
DROP INDEX events_transfer;
CREATE INDEX events_transfer ON events(transfer_id) WHERE transfer_id IS NOT NULL;

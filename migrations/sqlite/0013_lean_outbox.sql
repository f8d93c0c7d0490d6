-- Issue 23 §3 (lean storage): an event notification's idempotency key and hash are derived
-- when read (from its webhook and event id, and from its payload), and stored as '' then.
-- Only stored keys (blocks, tokens, simulations) need to be unique per webhook: an event's
-- notifications are written with the event, whose id is unique.
DROP INDEX notifications_idempotency;
CREATE UNIQUE INDEX notifications_idempotency ON notifications(webhook_id, idempotency_key)
    WHERE idempotency_key <> '';
-- Events are pruned with the delivery history they caused (delivery.retention_days).
CREATE INDEX events_created ON events(created_at);

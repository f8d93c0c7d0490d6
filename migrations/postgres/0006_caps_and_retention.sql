-- Issue 9 §6: block webhooks are counted per user (webhooks.max_per_user), and attempts and
-- finished notifications past delivery.retention_days are pruned by age.
CREATE INDEX webhooks_user ON webhooks(user_id, scope);
CREATE INDEX delivery_attempts_started ON delivery_attempts(started_at);
CREATE INDEX notifications_finished ON notifications(updated_at) WHERE state IN ('processed', 'failed');

-- Webhooks (§2.5), enterprise webhook secrets, the notification outbox (§2.6), delivery
-- attempts and ingested events. Times in notifications and attempts are Unix milliseconds.
CREATE TABLE webhooks (
    id TEXT PRIMARY KEY NOT NULL,
    scope TEXT NOT NULL,               -- wallet | block | enterprise
    wallet_id TEXT,
    enterprise_id TEXT,                -- the enterprise whose secret signs its notifications
    user_id TEXT NOT NULL,             -- creator; owner of block webhooks
    coin TEXT,
    type TEXT NOT NULL,
    url TEXT NOT NULL,
    label TEXT,
    num_confirmations BIGINT,
    state TEXT NOT NULL DEFAULT 'active',   -- active | suspended
    successive_failed_attempts BIGINT NOT NULL DEFAULT 0,
    failed_attempts_total BIGINT NOT NULL DEFAULT 0,
    counters_reset_at BIGINT NOT NULL DEFAULT 0,  -- ms; failures before it do not count
    listen_to_failure_states BOOLEAN NOT NULL DEFAULT FALSE,
    tx_request_states TEXT NOT NULL DEFAULT '[]',
    tx_request_transaction_states TEXT NOT NULL DEFAULT '[]',
    custom_headers TEXT NOT NULL DEFAULT '{}',
    allow_blocked_hosts BOOLEAN NOT NULL DEFAULT FALSE,
    created_at BIGINT NOT NULL
);
CREATE INDEX webhooks_wallet ON webhooks(wallet_id, type);
CREATE INDEX webhooks_enterprise ON webhooks(enterprise_id, scope, type);
CREATE INDEX webhooks_block ON webhooks(coin, scope, type);

CREATE TABLE webhook_secrets (
    enterprise_id TEXT PRIMARY KEY NOT NULL,
    current_enc BYTEA NOT NULL,
    previous_enc BYTEA,
    rotated_at BIGINT NOT NULL        -- seconds
);

CREATE TABLE notifications (
    id TEXT PRIMARY KEY NOT NULL,
    webhook_id TEXT NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    event_id TEXT,
    type TEXT NOT NULL,
    state TEXT NOT NULL,               -- new | pending | processed | failed
    simulation BOOLEAN NOT NULL DEFAULT FALSE,
    retries BIGINT NOT NULL DEFAULT 0,
    payload TEXT NOT NULL,
    hash TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}',
    next_attempt_at BIGINT NOT NULL,
    lease_until BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX notifications_idempotency ON notifications(webhook_id, idempotency_key);
CREATE INDEX notifications_due ON notifications(state, next_attempt_at);
CREATE INDEX notifications_webhook ON notifications(webhook_id, id);

CREATE TABLE delivery_attempts (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    notification_id TEXT NOT NULL REFERENCES notifications(id) ON DELETE CASCADE,
    webhook_id TEXT NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    started_at BIGINT NOT NULL,
    duration_ms BIGINT NOT NULL,
    status_code BIGINT,
    success BOOLEAN NOT NULL,
    response_body TEXT,
    error TEXT
);
CREATE INDEX delivery_attempts_notification ON delivery_attempts(notification_id, id);
CREATE INDEX delivery_attempts_failures ON delivery_attempts(webhook_id, success, started_at);

CREATE TABLE events (
    event_id TEXT PRIMARY KEY NOT NULL,
    result TEXT NOT NULL,
    body TEXT NOT NULL,
    transfer_id TEXT,
    created_at BIGINT NOT NULL
);
CREATE INDEX events_transfer ON events(transfer_id);

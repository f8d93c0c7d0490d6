-- Issue 10 §5: the append-only audit log, a hash chain. Each entry's hash is SHA-256 over the
-- previous entry's hash and the entry's canonical JSON; audit_head holds the chain's last
-- hash, and every append locks it, so the chain stays linear across processes.
CREATE TABLE audit_log (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    date BIGINT NOT NULL,                 -- Unix milliseconds
    type TEXT NOT NULL,
    user_id TEXT,
    enterprise_id TEXT,
    wallet_id TEXT,
    ip TEXT,
    token_id TEXT,
    request_id TEXT,
    data TEXT NOT NULL,
    hash TEXT NOT NULL
);
CREATE INDEX audit_log_user ON audit_log(user_id, seq);
CREATE INDEX audit_log_enterprise ON audit_log(enterprise_id, seq);

CREATE TABLE audit_head (
    id BIGINT PRIMARY KEY NOT NULL,
    hash TEXT NOT NULL
);
INSERT INTO audit_head (id, hash) VALUES (1, '0000000000000000000000000000000000000000000000000000000000000000');

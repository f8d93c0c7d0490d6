-- Nonces the signer filled (docs/withdrawals.md#nonce-gaps): a zero-value transaction from the
-- signing address to itself at a nonce reserved for a withdrawal that can no longer be sent (or
-- skipped on a node's false pending count), stored before it is sent so a crash resends the
-- same bytes.
CREATE TABLE nonce_fills (
    chain TEXT NOT NULL,
    address TEXT NOT NULL,
    nonce BIGINT NOT NULL,
    tx_hash TEXT NOT NULL,
    signed_tx TEXT NOT NULL,
    -- The failed withdrawal that had taken the nonce, when one had.
    tx_request_id TEXT,
    created_at BIGINT NOT NULL,
    -- 1 once the nonce is known used: the fill mined, or the failed withdrawal's own
    -- transaction found mined after all (it is then followed again).
    done BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (chain, address, nonce)
);
CREATE INDEX nonce_fills_by_withdrawal ON nonce_fills (tx_request_id);

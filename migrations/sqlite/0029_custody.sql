-- Keys Custodian holds for custodial wallets (docs/withdrawals.md). `handle` finds the private
-- part in its backend: for `sealed` the scalar sealed under the master key (hex), for
-- `pkcs11` the object's CKA_ID in the token. The private key is never stored in the clear.
CREATE TABLE custody_keys (
    id TEXT PRIMARY KEY,
    -- The custodial wallet the key was made for.
    wallet_id TEXT NOT NULL,
    backend TEXT NOT NULL,
    public_key TEXT NOT NULL,
    address TEXT NOT NULL,
    handle TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

-- Withdrawals (BitGo's txRequests). Amounts are decimal base units; times Unix seconds.
-- The nonce is stored before signing and the signed bytes before broadcasting, so a crash
-- resends the same transaction and never signs a second one.
CREATE TABLE withdrawals (
    id TEXT PRIMARY KEY,
    wallet_id TEXT NOT NULL,
    coin TEXT NOT NULL,
    enterprise TEXT,
    creator TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    state TEXT NOT NULL,
    version BIGINT NOT NULL,
    recipients TEXT NOT NULL,
    -- A token withdrawal: the token's coin (hteth:usdc) and contract; NULL for the chain's coin.
    token_coin TEXT,
    token_contract TEXT,
    comment TEXT,
    key_id TEXT NOT NULL,
    from_address TEXT NOT NULL,
    approval_id TEXT NOT NULL,
    nonce BIGINT,
    tx_hash TEXT,
    signed_tx TEXT,
    fee_reserve TEXT NOT NULL,
    error TEXT,
    -- The block that mined it, as the signer last saw (cleared when a reorg takes it away).
    mined_block BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    UNIQUE (wallet_id, idempotency_key)
);
CREATE INDEX withdrawals_by_state ON withdrawals (state, created_at);
CREATE INDEX withdrawals_by_wallet ON withdrawals (wallet_id, created_at);

-- Pending approvals; `resolvers` is a JSON array of {user, resolutionType, date}.
CREATE TABLE pending_approvals (
    id TEXT PRIMARY KEY,
    wallet_id TEXT NOT NULL,
    coin TEXT NOT NULL,
    enterprise TEXT,
    creator TEXT NOT NULL,
    state TEXT NOT NULL,
    approvals_required BIGINT NOT NULL,
    resolvers TEXT NOT NULL,
    tx_request_id TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX pending_approvals_by_wallet ON pending_approvals (wallet_id, created_at);
CREATE INDEX pending_approvals_by_state ON pending_approvals (state, expires_at);

-- The next nonce of each signing address: one row per (chain, address), advanced in the
-- transaction that stores a withdrawal's nonce, so two processes never hand out one twice.
CREATE TABLE signer_nonces (
    chain TEXT NOT NULL,
    address TEXT NOT NULL,
    next_nonce BIGINT NOT NULL,
    PRIMARY KEY (chain, address)
);

-- Every transaction signed for a withdrawal: the first, and each replacement at the same nonce
-- with higher fees (a stuck one). The one mined wins; the others end replaced. Fees in wei per
-- gas, as decimal text.
CREATE TABLE withdrawal_attempts (
    tx_request_id TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    tx_hash TEXT NOT NULL,
    signed_tx TEXT NOT NULL,
    max_fee_per_gas TEXT NOT NULL,
    priority_fee_per_gas TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (tx_request_id, attempt)
);
-- The chain watcher names the withdrawal a send it sees belongs to.
CREATE INDEX withdrawal_attempts_by_hash ON withdrawal_attempts (tx_hash);

-- Users' ECDH keychains (BitGoJS's `ensureEcdhKeychain`): the xpub, and the xprv as the client
-- encrypted it under the user's password; the server never sees the xprv in the clear. One of
-- them is the user's `ecdhKeychain` setting (`chosen`).
CREATE TABLE ecdh_keychains (
    user_id TEXT NOT NULL,
    xpub TEXT NOT NULL,
    encrypted_xprv TEXT NOT NULL,
    chosen BOOLEAN NOT NULL DEFAULT FALSE,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (user_id, xpub)
);

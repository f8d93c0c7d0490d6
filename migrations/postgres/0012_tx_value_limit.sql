-- Issue 20 §2: BitGoJS's addAccessToken may send a top-level txValueLimit, which becomes the
-- token's unlock.txValueLimit (spec §2.4). Canonical decimal digits (base units).
ALTER TABLE access_tokens ADD COLUMN tx_value_limit TEXT;

-- The unspent outputs of watched UTXO wallets (docs/chains.md#utxo-chains): Custodian's own
-- set, since a node's blocks do not carry the values of the outputs their inputs spend. An
-- output only in the mempool has height 999999999 and no block hash; spent_height is
-- 999999999 while the spending transaction is only in the mempool. Spent rows are kept for
-- reorg_depth blocks, so a reorg can undo the spend.
CREATE TABLE utxos (
    chain TEXT NOT NULL,
    txid TEXT NOT NULL,
    vout INTEGER NOT NULL,
    wallet_id TEXT NOT NULL,
    address TEXT NOT NULL,
    value INTEGER NOT NULL,
    height INTEGER NOT NULL,
    block_hash TEXT NOT NULL,
    date INTEGER NOT NULL,
    chain_code INTEGER,
    address_index INTEGER,
    spent_txid TEXT,
    spent_height INTEGER,
    PRIMARY KEY (chain, txid, vout)
);
CREATE INDEX utxos_wallet ON utxos(wallet_id, txid, vout);
CREATE INDEX utxos_chain_height ON utxos(chain, height);
CREATE INDEX utxos_chain_spent ON utxos(chain, spent_height);
CREATE INDEX utxos_spent_txid ON utxos(chain, spent_txid);
-- A UTXO transfer's inputs and outputs (JSON), BitGo's transfer.inputs and outputs.
ALTER TABLE transfers ADD COLUMN utxo TEXT;

-- Outputs are written unspent: the two indexes of spends hold spent rows only, so writing an
-- output updates three indexes, not five. Every query that uses them compares the spend
-- column, which implies it is not null.
DROP INDEX utxos_chain_spent;
DROP INDEX utxos_spent_txid;
CREATE INDEX utxos_chain_spent ON utxos(chain, spent_height) WHERE spent_height IS NOT NULL;
CREATE INDEX utxos_spent_txid ON utxos(chain, spent_txid) WHERE spent_txid IS NOT NULL;

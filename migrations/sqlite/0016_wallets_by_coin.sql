-- The chain watcher asks, every round, whether a chain coin's wallets changed (count and latest
-- change): answered from this index rather than a scan of every wallet.
CREATE INDEX wallets_coin ON wallets(coin, updated_at);

-- The rate limits' token buckets, shared by every process on this database
-- (docs/decisions.md#limits-shared-across-processes). One row per bucket ("api:<user id>",
-- "webhook:<id>"): tokens left when last refreshed, and when (Unix seconds, the database's clock,
-- so that hosts' clocks do not matter). Unlogged: no WAL per reservation; a crash forgets the
-- buckets, which only fills every one of them again.
CREATE UNLOGGED TABLE rate_buckets (
    bucket TEXT PRIMARY KEY,
    tokens DOUBLE PRECISION NOT NULL,
    refreshed_at DOUBLE PRECISION NOT NULL,
    granted DOUBLE PRECISION NOT NULL DEFAULT 0
);
CREATE INDEX rate_buckets_by_refresh ON rate_buckets (refreshed_at);

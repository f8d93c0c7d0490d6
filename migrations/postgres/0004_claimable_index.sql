-- Claims scan only notifications still to deliver, in due order (the claim query's ORDER BY),
-- instead of merging two ranges of (state, next_attempt_at) and sorting.
CREATE INDEX notifications_claimable ON notifications(next_attempt_at) WHERE state IN ('new', 'pending');
DROP INDEX notifications_due;

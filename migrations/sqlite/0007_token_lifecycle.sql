-- Issue 10: when a token was last used (written at most once a minute), and the unlock of a
-- session (Unix seconds).
ALTER TABLE access_tokens ADD COLUMN last_used_at INTEGER;
ALTER TABLE access_tokens ADD COLUMN unlock_time INTEGER;
ALTER TABLE access_tokens ADD COLUMN unlock_expires INTEGER;
CREATE INDEX access_tokens_user_created ON access_tokens(user_id, created_at, id);

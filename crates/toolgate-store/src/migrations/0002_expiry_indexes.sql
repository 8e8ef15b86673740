-- toolgate state, version 2: the start-up sweep deletes expired rows by `expires_at`; without an
-- index it read every row of `results` and `cache` (a 200 MB store made each CLI start 4× slower).
CREATE INDEX IF NOT EXISTS results_by_expiry ON results (expires_at);
CREATE INDEX IF NOT EXISTS cache_by_expiry ON cache (expires_at);
CREATE INDEX IF NOT EXISTS grants_by_expiry ON grants (expires_at) WHERE expires_at IS NOT NULL;

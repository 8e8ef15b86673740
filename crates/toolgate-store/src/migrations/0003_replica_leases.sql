-- toolgate state, version 3: gateway replicas hold leases. A replica renews its lease while it
-- lives; when a lease expires, a live replica closes the dead one's running calls as interrupted
-- and withdraws its asks (which now say who made them).
CREATE TABLE IF NOT EXISTS replicas (
    id          TEXT   PRIMARY KEY,
    started_at  BIGINT NOT NULL,
    lease_until BIGINT NOT NULL
);
ALTER TABLE approvals ADD COLUMN owner TEXT;
CREATE INDEX IF NOT EXISTS journal_open_by_owner ON journal (owner) WHERE state = 'started';

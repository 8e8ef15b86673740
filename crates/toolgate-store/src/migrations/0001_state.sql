-- toolgate state, version 1. Written in the subset of SQL that SQLite and PostgreSQL share, so
-- both stores apply the same text. Times are microseconds since the Unix epoch.
CREATE TABLE IF NOT EXISTS journal (
    session_id     TEXT    NOT NULL,
    call_id        TEXT    NOT NULL,
    turn_id        TEXT    NOT NULL,
    tool           TEXT    NOT NULL,
    arguments_hash BIGINT  NOT NULL,
    arguments      TEXT,
    repaired       BOOLEAN NOT NULL,
    raw            TEXT,
    state          TEXT    NOT NULL,
    error_type     TEXT,
    decision       TEXT,
    source         TEXT,
    hooks          TEXT,
    cache_hit      BOOLEAN NOT NULL,
    attempts       BIGINT  NOT NULL,
    started_at     BIGINT,
    waiting_ms     BIGINT  NOT NULL,
    running_ms     BIGINT  NOT NULL,
    may_have_run   BOOLEAN NOT NULL,
    finished_at    BIGINT,
    owner          TEXT,
    PRIMARY KEY (session_id, call_id)
);
CREATE INDEX IF NOT EXISTS journal_by_start ON journal (started_at);
CREATE INDEX IF NOT EXISTS journal_open ON journal (state) WHERE state = 'started';

CREATE TABLE IF NOT EXISTS grants (
    session_id TEXT NOT NULL,
    rule       TEXT NOT NULL,
    expires_at BIGINT,
    PRIMARY KEY (session_id, rule)
);

CREATE TABLE IF NOT EXISTS cache (
    key        TEXT   PRIMARY KEY,
    value      TEXT   NOT NULL,
    expires_at BIGINT NOT NULL
);

CREATE TABLE IF NOT EXISTS memory (
    principal  TEXT   NOT NULL,
    key        TEXT   NOT NULL,
    value      TEXT   NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (principal, key)
);

CREATE TABLE IF NOT EXISTS approvals (
    id         TEXT   PRIMARY KEY,
    session_id TEXT   NOT NULL,
    request    TEXT   NOT NULL,
    answer     TEXT,
    created_at BIGINT NOT NULL
);

CREATE TABLE IF NOT EXISTS results (
    session_id TEXT   NOT NULL,
    handle     TEXT   NOT NULL,
    value      TEXT   NOT NULL,
    bytes      BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (session_id, handle)
);

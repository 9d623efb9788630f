-- PostgreSQL: 0021_account_events.sql with PostgreSQL's types (double precision, bigint).
-- Each account's durable, ordered event log (`pheby.events.log`): what a process appended in the
-- write's own transaction, for every process to deliver in order. `seq` counts 1, 2, 3 … per account
-- with no gap; the head row holds the newest one taken, so a seq is never used twice, even after the
-- rows up to it are pruned.
CREATE TABLE account_event_heads (
    account_id TEXT PRIMARY KEY REFERENCES accounts (id) ON DELETE CASCADE,
    seq BIGINT NOT NULL                   -- the newest seq taken for the account
);

CREATE TABLE account_events (
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    kind TEXT NOT NULL,                  -- what happened, for the reader to dispatch on
    payload TEXT NOT NULL,               -- JSON
    at DOUBLE PRECISION NOT NULL,                    -- when it was appended (epoch seconds): retention by age
    PRIMARY KEY (account_id, seq)
);
CREATE INDEX account_events_at ON account_events (at);

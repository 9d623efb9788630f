-- PostgreSQL: 0007_history_log.sql with PostgreSQL's types (double precision, bigint, bytea).
-- The messages history has shown, kept by the server: after Hermes compresses a long
-- conversation, its transcript no longer lists the earlier turns, and these still do.
CREATE TABLE history_log (
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    hermes_id BIGINT NOT NULL,          -- the message's id in Hermes; history shows m<hermes_id>
    role TEXT NOT NULL,                  -- user or assistant
    text TEXT NOT NULL,                  -- as history shows it (the user's own words)
    ts TEXT,
    PRIMARY KEY (conversation_id, hermes_id)
);

-- PostgreSQL: 0006_conversation_overrides.sql with PostgreSQL's types (double precision, bigint, bytea).
-- A conversation's own model and reasoning effort, applied by the companion Hermes plugin.
CREATE TABLE conversation_overrides (
    conversation_id TEXT PRIMARY KEY REFERENCES conversations (id) ON DELETE CASCADE,
    model TEXT,                          -- NULL: the global model
    provider TEXT,
    effort TEXT,                         -- NULL: the global effort
    updated_at DOUBLE PRECISION NOT NULL
);

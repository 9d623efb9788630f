-- A conversation's own model and reasoning effort, applied by the companion Hermes plugin.
CREATE TABLE conversation_overrides (
    conversation_id TEXT PRIMARY KEY REFERENCES conversations (id) ON DELETE CASCADE,
    model TEXT,                          -- NULL: the global model
    provider TEXT,
    effort TEXT,                         -- NULL: the global effort
    updated_at REAL NOT NULL
);

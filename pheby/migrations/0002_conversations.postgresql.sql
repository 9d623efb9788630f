-- PostgreSQL: 0002_conversations.sql with PostgreSQL's types (double precision, bigint, bytea).
-- Pheby conversations: the routing entry from a conversation id to its Hermes sessions.
CREATE TABLE conversations (
    id TEXT PRIMARY KEY,                 -- 32 hex, server-generated
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    source TEXT NOT NULL DEFAULT 'hermes',   -- 'hermes' (chat) or 'task' (scheduled task output)
    job_id TEXT,                         -- the Hermes job of a task conversation
    yolo BIGINT NOT NULL DEFAULT 0,
    created_at DOUBLE PRECISION NOT NULL,
    last_active DOUBLE PRECISION
);
CREATE INDEX conversations_account ON conversations (account_id, last_active);
CREATE UNIQUE INDEX conversations_task ON conversations (account_id, job_id) WHERE job_id IS NOT NULL;

-- A conversation's Hermes sessions in order (a chat has one; a task gets one per cron run).
CREATE TABLE conversation_sessions (
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    session_id TEXT NOT NULL,
    position BIGINT NOT NULL,
    PRIMARY KEY (conversation_id, session_id)
);

-- Patterns approved with "session" scope, answered "once" for later requests in the conversation.
CREATE TABLE session_approvals (
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    pattern_key TEXT NOT NULL,
    PRIMARY KEY (conversation_id, pattern_key)
);

-- Cron sessions already turned into unsolicited output, per account.
CREATE TABLE cron_sessions_seen (
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    session_id TEXT NOT NULL,
    seen_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (account_id, session_id)
);

-- What the user typed, when the text sent to Hermes differs (attachments inlined), so
-- history shows the original.
CREATE TABLE turn_inputs (
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    input_sha256 TEXT NOT NULL,
    original_text TEXT NOT NULL,
    PRIMARY KEY (conversation_id, input_sha256)
);

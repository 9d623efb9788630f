-- What `pheby.hermes.history_pages.HistoryPages` knows of each conversation's log, kept across restarts so
-- that the first `conversation.open` after one reads the log, not the whole transcript, when Hermes has
-- not changed meanwhile: the state of the conversation's Hermes sessions at which the log was seen to
-- hold exactly what history shows, and the sessions a transcript read resolved to beyond its own.
CREATE TABLE history_sync (
    conversation_id TEXT PRIMARY KEY REFERENCES conversations (id) ON DELETE CASCADE,
    state TEXT,                         -- JSON list of [session id, messages, tokens in, tokens out, ended, reason]; NULL: not in sync
    resolved TEXT NOT NULL              -- JSON list of session ids
);

-- PostgreSQL: 0014_active_runs.sql with PostgreSQL's types (double precision, bigint, bytea).
-- Runs under way (`pheby.runs.journal`): what a new process needs to carry a run on after this one stops
-- or crashes. A row is written once Hermes has made the run, brought up to date every few seconds and at
-- a graceful stop, and deleted before the run's `run.finished` goes out.
CREATE TABLE active_runs (
    run_id TEXT PRIMARY KEY,            -- ours, as clients know it
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    hermes_run_id TEXT NOT NULL,
    gateway TEXT NOT NULL,              -- the account's own Hermes URL, '' for the server's
    user_text TEXT NOT NULL,            -- the user's words, as history shows them
    sent_text TEXT NOT NULL,            -- the input as Hermes stores it
    stored_before BIGINT NOT NULL,     -- the newest Hermes message id before the run
    extras TEXT NOT NULL,               -- the companion plugin's extras the run started with (JSON)
    judged_at DOUBLE PRECISION NOT NULL,            -- when the sender's credential was checked
    phase TEXT NOT NULL,
    cancel_requested BIGINT NOT NULL,
    position BIGINT,                   -- seq of the last event consumed, where the gateway numbers them
    streamed TEXT NOT NULL,             -- the text Hermes streamed up to `position`, tags and all
    tools TEXT NOT NULL,                -- the run's tool calls (JSON list of tool states)
    revision BIGINT NOT NULL,          -- each write's number: an older one never lands over a newer one
    admitted_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX active_runs_conversation ON active_runs (conversation_id);

-- The pending decisions of those runs, each with the request as clients were shown it.
CREATE TABLE run_decisions (
    decision_id TEXT PRIMARY KEY,       -- the approval_id or clarify_id clients answer
    run_id TEXT NOT NULL REFERENCES active_runs (run_id) ON DELETE CASCADE,
    request TEXT NOT NULL,              -- the approval.request or clarify.request frame (JSON)
    held_id TEXT NOT NULL,              -- the id Hermes (or the plugin) knows a clarification by
    pattern_keys TEXT NOT NULL,         -- an approval's patterns (JSON list), for "session" answers
    by_plugin BIGINT NOT NULL,
    unseen BIGINT NOT NULL,            -- asked while no server read the stream: it can only be denied
    asked_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX run_decisions_run ON run_decisions (run_id);

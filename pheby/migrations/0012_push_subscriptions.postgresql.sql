-- PostgreSQL: 0012_push_subscriptions.sql with PostgreSQL's types (double precision, bigint, bytea).
-- Web Push subscriptions (`pheby.push`): one row per browser or device an account asked to be
-- notified on. The endpoint is the push service's URL for that device; p256dh and auth are the
-- device's keys the messages are encrypted to. The same endpoint again updates its row (same id).
-- A subscription lives as long as the credential that made it: its token (token_id), or for the
-- owner secret (token_id NULL) until the account's credentials are next revoked.
CREATE TABLE push_subscriptions (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    endpoint TEXT NOT NULL,
    p256dh TEXT NOT NULL,               -- base64url, the uncompressed P-256 point
    auth TEXT NOT NULL,                 -- base64url, 16 bytes
    token_id TEXT REFERENCES auth_tokens (id) ON DELETE CASCADE,
    events TEXT NOT NULL,               -- JSON list of the events it asked for
    created_at DOUBLE PRECISION NOT NULL,
    UNIQUE (account_id, endpoint)
);

-- PostgreSQL: 0001_accounts.sql with PostgreSQL's types (double precision, bigint, bytea).
-- Accounts, their login sessions and bearer tokens, and failed-attempt records for lockouts.
CREATE TABLE accounts (
    id TEXT PRIMARY KEY,                 -- 32 hex
    name TEXT NOT NULL UNIQUE,
    password_hash TEXT,                  -- scrypt$n$r$p$salt$hash, NULL = no password login
    is_owner BIGINT NOT NULL DEFAULT 0,
    disabled BIGINT NOT NULL DEFAULT 0,
    created_at DOUBLE PRECISION NOT NULL,
    -- Per-account Hermes settings; never returned by any API.
    hermes_url TEXT,
    hermes_api_key TEXT,
    hermes_home TEXT,
    hermes_dashboard_url TEXT,
    hermes_dashboard_token TEXT
);
CREATE UNIQUE INDEX accounts_one_owner ON accounts (is_owner) WHERE is_owner = 1;

CREATE TABLE auth_tokens (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    token_sha256 TEXT NOT NULL UNIQUE,   -- only a digest is stored, never the token
    kind TEXT NOT NULL CHECK (kind IN ('session', 'api')),
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION,                     -- NULL = does not expire
    revoked_at DOUBLE PRECISION
);
CREATE INDEX auth_tokens_account ON auth_tokens (account_id);

CREATE TABLE auth_failures (
    scope TEXT NOT NULL,                 -- 'login' or 'hello'
    subject TEXT NOT NULL,               -- address, or address + username
    at DOUBLE PRECISION NOT NULL
);
CREATE INDEX auth_failures_lookup ON auth_failures (scope, subject, at);

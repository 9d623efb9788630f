-- PostgreSQL: 0017_totp.sql with PostgreSQL's types (double precision, bigint, bytea).
-- The second factor of password sign-in: an authenticator's TOTP secret per account, its recovery
-- codes and the tickets that carry a password sign-in over to its code step (`pheby.signin.totp`).
CREATE TABLE totp_secrets (
    account_id TEXT PRIMARY KEY REFERENCES accounts (id) ON DELETE CASCADE,
    -- Base32, kept in clear: every check computes the codes from it (as the authenticator does).
    secret TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    enabled_at DOUBLE PRECISION,                     -- NULL = pending: set up, not yet confirmed by a code
    -- The time step (unix time // 30) of the last code accepted; a code of this step or an older
    -- one is refused, so each code works once.
    last_step BIGINT
);

CREATE TABLE totp_recovery_codes (
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    code_sha256 TEXT NOT NULL,           -- only a digest is stored (the codes are 80 random bits)
    used_at DOUBLE PRECISION,                        -- NULL = unused; each code works once
    PRIMARY KEY (account_id, code_sha256)
);

CREATE TABLE totp_tickets (
    ticket_sha256 TEXT PRIMARY KEY,      -- only a digest is stored, never the ticket
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    expires_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX totp_tickets_expiry ON totp_tickets (expires_at);

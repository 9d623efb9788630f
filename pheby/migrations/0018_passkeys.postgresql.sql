-- PostgreSQL: 0018_passkeys.sql with PostgreSQL's types (double precision, bigint, bytea).
-- Passkeys (WebAuthn credentials, `pheby.signin.passkeys`): each one a public key an account registered
-- from a signed-in session. The credential id is the authenticator's; the sign count is the last one it
-- reported (a later assertion must report more, unless the authenticator keeps none: always 0).
CREATE TABLE passkeys (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    credential_id BYTEA NOT NULL UNIQUE,
    public_key BYTEA NOT NULL,           -- the COSE key, as the authenticator gave it
    sign_count BIGINT NOT NULL,
    transports TEXT NOT NULL,           -- JSON list, as the browser reported them
    name TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    last_used_at DOUBLE PRECISION
);
CREATE INDEX passkeys_by_account ON passkeys (account_id);

-- The challenges handed out for a registration or a sign-in: kept here, not in the client, and each
-- used at most once and only until it expires. A registration's challenge belongs to the session
-- that asked for it; a sign-in's to nobody yet.
CREATE TABLE webauthn_challenges (
    challenge BYTEA PRIMARY KEY,
    purpose TEXT NOT NULL,              -- 'register' or 'sign_in'
    account_id TEXT REFERENCES accounts (id) ON DELETE CASCADE,
    token_id TEXT,                      -- the session (or token) a registration was asked from
    expires_at DOUBLE PRECISION NOT NULL
);

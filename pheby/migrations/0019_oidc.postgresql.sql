-- PostgreSQL: 0019_oidc.sql with PostgreSQL's types (double precision, bigint, bytea).
-- OpenID Connect sign-in (`pheby.signin.oidc`). An identity is the provider's (issuer, subject) pair, the
-- only stable key OIDC gives: never the e-mail address, which a provider may let a person change.
CREATE TABLE oidc_identities (
    issuer TEXT NOT NULL,
    subject TEXT NOT NULL,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (issuer, subject)
);
CREATE INDEX oidc_identities_account ON oidc_identities (account_id);

-- A sign-in begun at the provider and not yet back: single-use (deleted when taken) and short-lived.
-- Only a digest of `state` is stored; the nonce and the PKCE verifier are only worth anything with it.
CREATE TABLE oidc_pending_logins (
    state_sha256 TEXT PRIMARY KEY,
    nonce TEXT NOT NULL,
    code_verifier TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX oidc_pending_logins_expiry ON oidc_pending_logins (expires_at);

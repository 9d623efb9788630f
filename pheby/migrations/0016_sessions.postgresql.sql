-- PostgreSQL: 0016_sessions.sql with PostgreSQL's types (double precision, bigint, bytea).
-- Sessions are listed and ended by their owner: what signed them in, from which device, and when they
-- were last used. `authenticated_at` is when the person last proved who they are on this session
-- (its sign-in, or a re-authentication): adding a passkey asks for a recent one.
ALTER TABLE auth_tokens ADD COLUMN device TEXT;
ALTER TABLE auth_tokens ADD COLUMN method TEXT;
ALTER TABLE auth_tokens ADD COLUMN last_used_at DOUBLE PRECISION;
ALTER TABLE auth_tokens ADD COLUMN authenticated_at DOUBLE PRECISION;

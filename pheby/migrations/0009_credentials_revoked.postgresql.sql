-- PostgreSQL: 0009_credentials_revoked.sql with PostgreSQL's types (double precision, bigint, bytea).
-- `pheby account revoke`: when every credential of the account was last revoked. A running server
-- notices the change and cancels the account's runs besides closing its sockets.
ALTER TABLE accounts ADD COLUMN credentials_revoked_at DOUBLE PRECISION;

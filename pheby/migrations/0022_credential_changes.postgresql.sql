-- PostgreSQL has no `data_version`: one row counts the statements that may end a credential (an account
-- disabled, revoked or removed; a token revoked, expiring sooner or removed), so `pheby.revocation` sweeps
-- the live sockets only after one, whichever process made it. A token's last use moves nothing.
CREATE TABLE credential_changes (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version BIGINT NOT NULL
);
INSERT INTO credential_changes (id, version) VALUES (1, 0);

CREATE FUNCTION pheby_credentials_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE credential_changes SET version = version + 1 WHERE id = 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER credentials_changed_by_accounts
AFTER UPDATE OF disabled, credentials_revoked_at OR DELETE ON accounts
FOR EACH STATEMENT EXECUTE FUNCTION pheby_credentials_changed();

CREATE TRIGGER credentials_changed_by_tokens
AFTER UPDATE OF revoked_at, expires_at OR DELETE ON auth_tokens
FOR EACH STATEMENT EXECUTE FUNCTION pheby_credentials_changed();

-- PostgreSQL: 0005_artifacts.sql with PostgreSQL's types (double precision, bigint, bytea).
-- Hope artifacts: documents with a revision counter and every version kept.
-- A deleted artifact is a tombstone (`deleted_at`); its versions stay and keep counting against quotas.
CREATE TABLE artifacts (
    id TEXT PRIMARY KEY,                 -- 32 hex
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    title TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('text', 'markdown', 'code')),
    revision BIGINT NOT NULL,           -- the current version; also how many versions there are
    created_at BIGINT NOT NULL,         -- Unix seconds
    updated_at BIGINT NOT NULL,
    deleted_at BIGINT                   -- tombstone
);
CREATE INDEX artifacts_account ON artifacts (account_id, updated_at);

-- Content lives here only: the current content is the version whose revision is the artifact's.
CREATE TABLE artifact_versions (
    artifact_id TEXT NOT NULL REFERENCES artifacts (id) ON DELETE CASCADE,
    revision BIGINT NOT NULL,
    content TEXT NOT NULL,
    size BIGINT NOT NULL,               -- UTF-8 bytes of content
    created_at BIGINT NOT NULL,
    PRIMARY KEY (artifact_id, revision)
);

-- Retained version bytes per account, kept with every version written, so the per-account and
-- global quotas are checked without summing every version.
CREATE TABLE artifact_usage (
    account_id TEXT PRIMARY KEY REFERENCES accounts (id) ON DELETE CASCADE,
    bytes BIGINT NOT NULL
);

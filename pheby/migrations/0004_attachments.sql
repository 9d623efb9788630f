-- Attachments of both surfaces: one row of metadata each, bytes in the BlobStore.
CREATE TABLE attachments (
    id TEXT PRIMARY KEY,                 -- 32 hex
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    surface TEXT NOT NULL CHECK (surface IN ('pheby', 'hope')),
    direction TEXT NOT NULL CHECK (direction IN ('inbound', 'outbound')),
    conversation_id TEXT,                -- Pheby only; kept after the conversation is deleted
    message_id TEXT,                     -- the turn it is anchored to (NULL until claimed)
    filename TEXT NOT NULL,
    mime TEXT NOT NULL,
    size INTEGER NOT NULL,
    blob_key TEXT NOT NULL,
    extraction_status TEXT NOT NULL
        CHECK (extraction_status IN ('ready', 'truncated', 'image', 'unavailable', 'encrypted', 'failed')),
    extracted_text TEXT,
    created_at REAL NOT NULL,
    expires_at REAL,                     -- NULL = kept
    claimed_at REAL,                     -- Pheby uploads: when chat.send took them
    deleted_at REAL                      -- tombstone: bytes gone, row kept
);
CREATE INDEX attachments_account ON attachments (account_id, created_at);
CREATE INDEX attachments_conversation ON attachments (conversation_id);
CREATE INDEX attachments_expiry ON attachments (expires_at) WHERE deleted_at IS NULL;

-- The change feed of `/api/features/sync`: every create and delete of an attachment or artifact.
CREATE TABLE changes (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    kind TEXT NOT NULL CHECK (kind IN ('attachment', 'artifact')),
    object_id TEXT NOT NULL,
    deleted INTEGER NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX changes_account ON changes (account_id, sequence);

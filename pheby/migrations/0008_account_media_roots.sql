-- The directories of the server's disk an account's MEDIA: deliverables may be copied from
-- (`pheby account hermes NAME --media-root DIR`): a JSON array of absolute paths, NULL = none.
-- The owner uses PHEBY_MEDIA_ROOTS; an account with its own gateway never has any.
ALTER TABLE accounts ADD COLUMN media_roots TEXT;

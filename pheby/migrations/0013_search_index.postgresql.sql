-- PostgreSQL: the search index of 0013_search_index.sql (`pheby.search`), with the same rows.
--
-- The rows are numbered as SQLite's are: each account owns a partition of the numbers (number × 2^40 up
-- to the next); a message's row is history_log's own id, in the lower half, numbered in the order its
-- account's messages were logged; a conversation's name and each searchable attachment are rows of
-- search_labels, in the upper half. So a search reads the same rows in the same order on both engines.
--
-- The triggers below keep which rows the index holds in the same transaction as each write of their text
-- (a logged message, a new, renamed or deleted conversation, an attachment claimed, tombstoned or deleted,
-- an account removed), with the conditions of SQLite's. What they cannot do is tokenize: the terms are
-- Python's (`pheby.search.tokens`, as FTS5's unicode61 would give them), which PostgreSQL's own parser and
-- lower() (locale-dependent) would not reproduce. So a new or changed row is queued (search_pending; a
-- changed one taken out of the index meanwhile), and `pheby.search.documents.index_pending` writes its
-- terms as a tsvector literal: the stores call it in the writing transaction, and a search calls it before
-- it reads, for rows a write outside the stores left. A row of search_index is written once, with its
-- terms: no version of it without them is left behind for VACUUM, in the table or its indexes.

ALTER TABLE history_log DROP CONSTRAINT history_log_pkey;
ALTER TABLE history_log ADD COLUMN id BIGINT;
ALTER TABLE history_log ADD CONSTRAINT history_log_message UNIQUE (conversation_id, hermes_id);

-- Each account's partition; a number is never reused.
CREATE TABLE search_partitions (
    number BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id TEXT NOT NULL UNIQUE REFERENCES accounts (id) ON DELETE CASCADE
);
INSERT INTO search_partitions (account_id) SELECT id FROM accounts ORDER BY created_at, id;
CREATE FUNCTION search_partition_of_new_account() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO search_partitions (account_id) VALUES (NEW.id);
    RETURN NULL;
END $$;
CREATE TRIGGER search_partition_of_new_account AFTER INSERT ON accounts
FOR EACH ROW EXECUTE FUNCTION search_partition_of_new_account();

UPDATE history_log h SET id = n.id
FROM (
    SELECT h2.conversation_id, h2.hermes_id,
           p.number * 1099511627776 + ROW_NUMBER() OVER (PARTITION BY p.number ORDER BY h2.ctid) AS id
    FROM history_log h2
    JOIN conversations c ON c.id = h2.conversation_id
    JOIN search_partitions p ON p.account_id = c.account_id
) n
WHERE h.conversation_id = n.conversation_id AND h.hermes_id = n.hermes_id;
ALTER TABLE history_log ALTER COLUMN id SET NOT NULL;
ALTER TABLE history_log ADD PRIMARY KEY (id);

-- The index rows of what is not a message: a conversation's name (attachment_id NULL) and each
-- searchable attachment (a Pheby attachment of a conversation, claimed or delivered, live, with text).
CREATE TABLE search_labels (
    id BIGINT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    attachment_id TEXT UNIQUE
);
CREATE INDEX search_labels_conversation ON search_labels (conversation_id);

-- The index: a row's terms and its length in tokens (BM25's, `pheby.search`).
CREATE TABLE search_index (
    id BIGINT PRIMARY KEY,               -- history_log's id, or search_labels'
    terms TSVECTOR NOT NULL,
    length INTEGER NOT NULL
);
CREATE INDEX search_index_terms ON search_index USING gin (terms);

-- The rows whose terms are to be written (see above). Small, so vacuumed often: finding them stays cheap.
CREATE TABLE search_pending (
    id BIGINT PRIMARY KEY
);

-- The totals BM25's average row length is read from (FTS5 keeps the same), of the rows with terms. They are
-- kept per statement, from its transition tables: one update of the totals however many rows a statement
-- writes (`index_pending` writes all of a transaction's pending rows in one), none when it changed none.
CREATE TABLE search_totals (
    only_row BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
    documents BIGINT NOT NULL,
    tokens BIGINT NOT NULL
);
INSERT INTO search_totals (documents, tokens) VALUES (0, 0);
CREATE FUNCTION search_count() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    added_documents BIGINT := 0;
    added_tokens BIGINT := 0;
    removed_documents BIGINT := 0;
    removed_tokens BIGINT := 0;
BEGIN
    IF TG_OP <> 'DELETE' THEN
        SELECT count(*), COALESCE(sum(length), 0) INTO added_documents, added_tokens FROM new_rows;
    END IF;
    IF TG_OP <> 'INSERT' THEN
        SELECT count(*), COALESCE(sum(length), 0) INTO removed_documents, removed_tokens FROM old_rows;
    END IF;
    IF added_documents <> removed_documents OR added_tokens <> removed_tokens THEN
        UPDATE search_totals
        SET documents = documents + added_documents - removed_documents,
            tokens = tokens + added_tokens - removed_tokens;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER search_count_inserted AFTER INSERT ON search_index
REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION search_count();
CREATE TRIGGER search_count_updated AFTER UPDATE ON search_index
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION search_count();
CREATE TRIGGER search_count_deleted AFTER DELETE ON search_index
REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION search_count();

-- The next free row of an account's label range ([n × 2^40 + 2^39, (n + 1) × 2^40)).
CREATE FUNCTION search_next_label_row(account TEXT) RETURNS BIGINT LANGUAGE sql STABLE AS $$
    SELECT COALESCE(
        (SELECT MAX(l.id) FROM search_labels l
         WHERE l.id BETWEEN p.number * 1099511627776 + 549755813888 AND (p.number + 1) * 1099511627776 - 1),
        p.number * 1099511627776 + 549755813888) + 1
    FROM search_partitions p WHERE p.account_id = account
$$;

INSERT INTO search_labels (id, conversation_id, attachment_id)
SELECT p.number * 1099511627776 + 549755813888 + ROW_NUMBER() OVER (PARTITION BY p.number ORDER BY s.at, s.attachment_id),
       s.conversation_id, s.attachment_id
FROM (
    SELECT account_id, id AS conversation_id, NULL AS attachment_id, created_at AS at FROM conversations
    UNION ALL
    SELECT a.account_id, a.conversation_id, a.id, a.created_at FROM attachments a
    JOIN conversations c ON c.id = a.conversation_id AND c.account_id = a.account_id
    WHERE a.surface = 'pheby' AND a.deleted_at IS NULL AND a.extracted_text IS NOT NULL
      AND (a.direction = 'outbound' OR a.claimed_at IS NOT NULL)
) s
JOIN search_partitions p ON p.account_id = s.account_id;
INSERT INTO search_pending (id) SELECT id FROM history_log UNION ALL SELECT id FROM search_labels;

-- Messages: a new one is numbered in its account's message range (whatever id the insert named), then
-- indexed under it.
CREATE FUNCTION search_message_row() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    first BIGINT;
BEGIN
    SELECT p.number * 1099511627776 INTO first
    FROM conversations c JOIN search_partitions p ON p.account_id = c.account_id WHERE c.id = NEW.conversation_id;
    IF first IS NOT NULL AND (NEW.id IS NULL OR NEW.id NOT BETWEEN first AND first + 549755813887) THEN
        NEW.id := COALESCE(
            (SELECT MAX(h.id) FROM history_log h WHERE h.id BETWEEN first AND first + 549755813887), first
        ) + 1;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER search_message_row BEFORE INSERT ON history_log
FOR EACH ROW EXECUTE FUNCTION search_message_row();

-- Indexed (and forgotten) per statement: a statement logging many messages adds their rows in one insert.
CREATE FUNCTION search_message_logged() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO search_pending (id) SELECT id FROM new_rows;
    RETURN NULL;
END $$;
CREATE TRIGGER search_message_logged AFTER INSERT ON history_log
REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION search_message_logged();

CREATE FUNCTION search_message_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM search_index WHERE id IN (SELECT id FROM old_rows);
    DELETE FROM search_pending WHERE id IN (SELECT id FROM old_rows);
    RETURN NULL;
END $$;
CREATE TRIGGER search_message_deleted AFTER DELETE ON history_log
REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION search_message_deleted();

-- Conversation names. A deleted conversation takes its name and its attachments' rows along (the
-- attachments themselves stay until they expire); its messages go with history_log's cascade.
CREATE FUNCTION search_conversation_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO search_labels (id, conversation_id) VALUES (search_next_label_row(NEW.account_id), NEW.id);
    INSERT INTO search_pending (id)
    SELECT id FROM search_labels WHERE conversation_id = NEW.id AND attachment_id IS NULL;
    RETURN NULL;
END $$;
CREATE TRIGGER search_conversation_created AFTER INSERT ON conversations
FOR EACH ROW EXECUTE FUNCTION search_conversation_created();

CREATE FUNCTION search_conversation_renamed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM search_index
    WHERE id IN (SELECT id FROM search_labels WHERE conversation_id = NEW.id AND attachment_id IS NULL);
    INSERT INTO search_pending (id)
    SELECT id FROM search_labels WHERE conversation_id = NEW.id AND attachment_id IS NULL
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER search_conversation_renamed AFTER UPDATE OF name ON conversations
FOR EACH ROW WHEN (OLD.name IS DISTINCT FROM NEW.name) EXECUTE FUNCTION search_conversation_renamed();

CREATE FUNCTION search_conversation_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM search_index WHERE id IN (SELECT id FROM search_labels WHERE conversation_id = OLD.id);
    DELETE FROM search_pending WHERE id IN (SELECT id FROM search_labels WHERE conversation_id = OLD.id);
    DELETE FROM search_labels WHERE conversation_id = OLD.id;
    RETURN NULL;
END $$;
CREATE TRIGGER search_conversation_deleted AFTER DELETE ON conversations
FOR EACH ROW EXECUTE FUNCTION search_conversation_deleted();

-- Attachments: indexed while searchable, as their name and their text. Any update of a column the
-- condition or the text reads takes the row out and, if still searchable, puts it back as the newest.
CREATE FUNCTION search_attachment_forget(attachment TEXT) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM search_index WHERE id IN (SELECT id FROM search_labels WHERE attachment_id = attachment);
    DELETE FROM search_pending WHERE id IN (SELECT id FROM search_labels WHERE attachment_id = attachment);
    DELETE FROM search_labels WHERE attachment_id = attachment;
END $$;

CREATE FUNCTION search_attachment_index() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        PERFORM search_attachment_forget(OLD.id);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.surface = 'pheby' AND NEW.deleted_at IS NULL AND NEW.extracted_text IS NOT NULL
       AND (NEW.direction = 'outbound' OR NEW.claimed_at IS NOT NULL)
       AND EXISTS (SELECT 1 FROM conversations c WHERE c.id = NEW.conversation_id AND c.account_id = NEW.account_id)
    THEN
        INSERT INTO search_labels (id, conversation_id, attachment_id)
        VALUES (search_next_label_row(NEW.account_id), NEW.conversation_id, NEW.id);
        INSERT INTO search_pending (id) SELECT id FROM search_labels WHERE attachment_id = NEW.id;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER search_attachment_added AFTER INSERT ON attachments
FOR EACH ROW EXECUTE FUNCTION search_attachment_index();
CREATE TRIGGER search_attachment_changed
AFTER UPDATE OF surface, direction, conversation_id, filename, extracted_text, claimed_at, deleted_at ON attachments
FOR EACH ROW EXECUTE FUNCTION search_attachment_index();
CREATE TRIGGER search_attachment_deleted AFTER DELETE ON attachments
FOR EACH ROW EXECUTE FUNCTION search_attachment_index();

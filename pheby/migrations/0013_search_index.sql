-- Full-text search over each account's conversations (`pheby.search`): the messages history_log keeps
-- (the user's words and the agent's answers, never tool output), the conversations' names, and the
-- extracted text of their attachments, under the attachment's name.
--
-- One contentless FTS5 table holds it all: the text itself stays where it is (history_log,
-- conversations, attachments), the index stores only terms, positions and sizes. Each account owns a
-- range of its rowids (a partition: number × 2^40 up to the next), so a search reads the caller's range
-- alone, whatever the other accounts hold: messages take the lower half of the range (their index row
-- is history_log's own id), names and attachments the upper half (rows of search_labels).
--
-- The triggers below keep the index in the same transaction as each write of the text it holds, so it
-- never lags or disagrees: a logged message, a new, renamed or deleted conversation, an attachment
-- claimed, tombstoned or deleted, and an account removed (its cascade deletes fire them too). A
-- contentless table forgets a row by being told its old text ('delete'), which every trigger has.

-- Each account's partition of the index; AUTOINCREMENT: a number is never reused.
CREATE TABLE search_partitions (
    number INTEGER PRIMARY KEY AUTOINCREMENT,
    account_id TEXT NOT NULL UNIQUE REFERENCES accounts (id) ON DELETE CASCADE
);
INSERT INTO search_partitions (account_id) SELECT id FROM accounts ORDER BY created_at, id;
CREATE TRIGGER search_partition_of_new_account AFTER INSERT ON accounts BEGIN
    INSERT INTO search_partitions (account_id) VALUES (new.id);
END;

-- history_log again, with an explicit integer key (stable across VACUUM): its index row, numbered in
-- its account's message range, in the order the messages were logged.
CREATE TABLE history_log_keyed (
    id INTEGER PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    hermes_id INTEGER NOT NULL,          -- the message's id in Hermes; history shows m<hermes_id>
    role TEXT NOT NULL,                  -- user or assistant
    text TEXT NOT NULL,                  -- as history shows it (the user's own words)
    ts TEXT,
    UNIQUE (conversation_id, hermes_id)
);
INSERT INTO history_log_keyed (id, conversation_id, hermes_id, role, text, ts)
SELECT p.number * 1099511627776 + ROW_NUMBER() OVER (PARTITION BY p.number ORDER BY h.rowid),
       h.conversation_id, h.hermes_id, h.role, h.text, h.ts
FROM history_log h
JOIN conversations c ON c.id = h.conversation_id
JOIN search_partitions p ON p.account_id = c.account_id;
DROP TABLE history_log;
ALTER TABLE history_log_keyed RENAME TO history_log;

-- The index rows of what is not a message: a conversation's name (attachment_id NULL) and each
-- searchable attachment (a Pheby attachment of a conversation, claimed or delivered, live, with text).
CREATE TABLE search_labels (
    id INTEGER PRIMARY KEY,              -- its row in search_index, in its account's label range
    conversation_id TEXT NOT NULL,
    attachment_id TEXT UNIQUE
);
CREATE INDEX search_labels_conversation ON search_labels (conversation_id);

-- The next free row of each account's two ranges (message rows: [n × 2^40, n × 2^40 + 2^39); label
-- rows: [n × 2^40 + 2^39, (n + 1) × 2^40)).
CREATE VIEW search_next_rows AS
SELECT p.account_id,
       COALESCE((SELECT MAX(h.id) FROM history_log h
                 WHERE h.id BETWEEN p.number * 1099511627776 AND p.number * 1099511627776 + 549755813887),
                p.number * 1099511627776) + 1 AS message_row,
       COALESCE((SELECT MAX(l.id) FROM search_labels l
                 WHERE l.id BETWEEN p.number * 1099511627776 + 549755813888 AND (p.number + 1) * 1099511627776 - 1),
                p.number * 1099511627776 + 549755813888) + 1 AS label_row,
       p.number * 1099511627776 AS message_first,
       p.number * 1099511627776 + 549755813887 AS message_last
FROM search_partitions p;

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

-- Contentless (the text is not copied), full detail (phrases), prefix indexes of 2, 3 and 4 characters
-- (short `prefix*` terms read one list instead of merging every term's); folded case and diacritics.
CREATE VIRTUAL TABLE search_index USING fts5(
    body, content = '', detail = full, prefix = '2 3 4', tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO search_index (rowid, body) SELECT id, text FROM history_log;
INSERT INTO search_index (rowid, body)
SELECT l.id, c.name FROM search_labels l JOIN conversations c ON c.id = l.conversation_id
WHERE l.attachment_id IS NULL;
INSERT INTO search_index (rowid, body)
SELECT l.id, a.filename || char(10) || a.extracted_text FROM search_labels l JOIN attachments a ON a.id = l.attachment_id;

-- Messages. A row inserted without an id of its account's range (every insert: the store names no id)
-- is moved to the next one, then indexed under it.
CREATE TRIGGER search_message_logged AFTER INSERT ON history_log BEGIN
    UPDATE history_log SET id = (
        SELECT n.message_row FROM search_next_rows n JOIN conversations c ON c.account_id = n.account_id
        WHERE c.id = new.conversation_id
    )
    WHERE id = new.id AND NOT EXISTS (
        SELECT 1 FROM search_next_rows n JOIN conversations c ON c.account_id = n.account_id
        WHERE c.id = new.conversation_id AND new.id BETWEEN n.message_first AND n.message_last
    );
    INSERT INTO search_index (rowid, body)
    SELECT id, new.text FROM history_log WHERE conversation_id = new.conversation_id AND hermes_id = new.hermes_id;
END;
CREATE TRIGGER search_message_deleted AFTER DELETE ON history_log BEGIN
    INSERT INTO search_index (search_index, rowid, body) VALUES ('delete', old.id, old.text);
END;

-- Conversation names.
CREATE TRIGGER search_conversation_created AFTER INSERT ON conversations BEGIN
    INSERT INTO search_labels (id, conversation_id)
    SELECT label_row, new.id FROM search_next_rows WHERE account_id = new.account_id;
    INSERT INTO search_index (rowid, body)
    SELECT id, new.name FROM search_labels WHERE conversation_id = new.id AND attachment_id IS NULL;
END;
CREATE TRIGGER search_conversation_renamed AFTER UPDATE OF name ON conversations WHEN old.name IS NOT new.name BEGIN
    INSERT INTO search_index (search_index, rowid, body)
    SELECT 'delete', id, old.name FROM search_labels WHERE conversation_id = old.id AND attachment_id IS NULL;
    INSERT INTO search_index (rowid, body)
    SELECT id, new.name FROM search_labels WHERE conversation_id = new.id AND attachment_id IS NULL;
END;
-- A deleted conversation takes its name and its attachments' rows along (the attachments themselves stay
-- until they expire); its messages go with history_log's cascade.
CREATE TRIGGER search_conversation_deleted AFTER DELETE ON conversations BEGIN
    INSERT INTO search_index (search_index, rowid, body)
    SELECT 'delete', id, old.name FROM search_labels WHERE conversation_id = old.id AND attachment_id IS NULL;
    INSERT INTO search_index (search_index, rowid, body)
    SELECT 'delete', l.id, a.filename || char(10) || a.extracted_text
    FROM search_labels l JOIN attachments a ON a.id = l.attachment_id WHERE l.conversation_id = old.id;
    DELETE FROM search_labels WHERE conversation_id = old.id;
END;

-- Attachments: indexed while searchable, as their name and their text.
CREATE TRIGGER search_attachment_added AFTER INSERT ON attachments
WHEN new.surface = 'pheby' AND new.deleted_at IS NULL AND new.extracted_text IS NOT NULL
     AND (new.direction = 'outbound' OR new.claimed_at IS NOT NULL)
BEGIN
    INSERT INTO search_labels (id, conversation_id, attachment_id)
    SELECT n.label_row, new.conversation_id, new.id FROM search_next_rows n
    JOIN conversations c ON c.account_id = n.account_id
    WHERE c.id = new.conversation_id AND c.account_id = new.account_id;
    INSERT INTO search_index (rowid, body)
    SELECT id, new.filename || char(10) || new.extracted_text FROM search_labels WHERE attachment_id = new.id;
END;
CREATE TRIGGER search_attachment_changed
AFTER UPDATE OF surface, direction, conversation_id, filename, extracted_text, claimed_at, deleted_at ON attachments
BEGIN
    INSERT INTO search_index (search_index, rowid, body)
    SELECT 'delete', id, old.filename || char(10) || old.extracted_text FROM search_labels WHERE attachment_id = old.id;
    DELETE FROM search_labels WHERE attachment_id = old.id;
    INSERT INTO search_labels (id, conversation_id, attachment_id)
    SELECT n.label_row, new.conversation_id, new.id FROM search_next_rows n
    JOIN conversations c ON c.account_id = n.account_id
    WHERE c.id = new.conversation_id AND c.account_id = new.account_id
      AND new.surface = 'pheby' AND new.deleted_at IS NULL AND new.extracted_text IS NOT NULL
      AND (new.direction = 'outbound' OR new.claimed_at IS NOT NULL);
    INSERT INTO search_index (rowid, body)
    SELECT id, new.filename || char(10) || new.extracted_text FROM search_labels WHERE attachment_id = new.id;
END;
CREATE TRIGGER search_attachment_deleted AFTER DELETE ON attachments BEGIN
    INSERT INTO search_index (search_index, rowid, body)
    SELECT 'delete', id, old.filename || char(10) || old.extracted_text FROM search_labels WHERE attachment_id = old.id;
    DELETE FROM search_labels WHERE attachment_id = old.id;
END;

-- PostgreSQL: 0011_transcript_turns.sql with PostgreSQL's types (double precision, bigint, bytea).
-- The text turns a conversation's Hermes transcript lists now, as Hermes stored them (a compaction
-- summary included, the turns it replaced not): what a run is sent as its history on a gateway that
-- loads none itself. Kept beside history_log, from the same transcript read, so a run in a
-- conversation whose log is in sync is sent its history without reading the whole transcript.
CREATE TABLE transcript_turns (
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    hermes_id BIGINT NOT NULL,          -- the message's id in Hermes
    role TEXT NOT NULL,                  -- user or assistant
    content TEXT NOT NULL,               -- as Hermes stored it (attachments inlined, MEDIA: tags kept)
    PRIMARY KEY (conversation_id, hermes_id)
);

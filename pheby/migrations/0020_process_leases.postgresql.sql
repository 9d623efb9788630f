-- PostgreSQL: 0020_process_leases.sql with PostgreSQL's types.
-- Leases a process holds on the database (`pheby.process_lease`): what is held, by whom, until when.
-- 'server': the one `pheby serve` process of a PostgreSQL database.
CREATE TABLE process_leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,               -- host, pid and a random part of the holding process
    expires_at DOUBLE PRECISION NOT NULL            -- renewed while the holder lives; past it, anyone may take it
);

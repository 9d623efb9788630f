-- SQLite: nothing. On PostgreSQL (the `.postgresql.sql` beside this) a write that queues rows for their
-- search terms says so to the client, which then writes them before it commits; FTS5's triggers index
-- the rows themselves.
SELECT 1;

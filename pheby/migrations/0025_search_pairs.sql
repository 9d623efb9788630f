-- SQLite: nothing. On PostgreSQL (the `.postgresql.sql` beside this) each search row's terms gain the
-- lexemes of its word pairs and of its range (`pheby.search.documents.terms`); FTS5 keeps positions in
-- its index and finds phrases without them.
SELECT 1;

-- A statement that queues rows for their terms (search_pending, 0013_search_index.postgresql.sql) tells the
-- client with a notice, in the same reply as the statement's own result: the commit step
-- (`pheby.search.documents.index_written`) reads the queue only in a transaction that heard it, and every
-- other transaction is a round trip shorter. A notice can say more than was queued (a statement that
-- queued no row), never less: rows queued by SQL no transaction of ours ran (nobody heard the notice) are
-- written by the next search, which empties the queue before it reads.
CREATE OR REPLACE FUNCTION search_queued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'pheby: rows queued for search';
    RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER search_queued AFTER INSERT ON search_pending
FOR EACH STATEMENT EXECUTE FUNCTION search_queued();

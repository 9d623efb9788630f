-- Each row's terms now hold the lexemes of its word pairs and of its range as well as its words
-- (`pheby.search.documents.terms`; why: `pheby.search.word_pairs`, `pheby.search.postgres_index`). The
-- terms are Python's to write: every row is queued again, and its terms are rewritten by the next
-- `index_pending` (the server runs it as it starts, in batches of their own transactions; until then a
-- search, which brings the index up to date before it reads, does). A queued row keeps its old terms
-- meanwhile, so nothing drops out of the index.
INSERT INTO search_pending (id) SELECT id FROM search_index ON CONFLICT DO NOTHING;

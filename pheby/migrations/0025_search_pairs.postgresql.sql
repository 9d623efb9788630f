-- Each row's terms now hold the lexemes of its word pairs and of its range as well as its words
-- (`pheby.search.documents.terms`; why: `pheby.search.word_pairs`, `pheby.search.postgres_index`). The
-- terms are Python's to write: every row is queued again, and its terms are rewritten as the server
-- starts (`SearchIndex.prepare`, a batch or two per transaction); a write meanwhile rewrites a batch of
-- them, and a search all that are left before it reads. A queued row keeps its old terms meanwhile, so
-- nothing drops out of the index.
INSERT INTO search_pending (id) SELECT id FROM search_index ON CONFLICT DO NOTHING;

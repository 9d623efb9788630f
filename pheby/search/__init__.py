"""Full-text search over an account's conversations: the query grammar (`query`), the terms as the
index sees them (`tokens`), highlighted snippets (`snippets`), BM25 over a window's rows (`ranking`)
and the index itself (`index`; its table and the triggers that keep it are
pheby/migrations/0013_search_index.sql).

May import: the basics (`pheby.db`, `pheby.errors`, `pheby.settings`), `pheby.protocol.frames` (the
wire shape of a result) and `pheby.store`; never `pheby.hermes`, `pheby.runs`, `pheby.plugin` or
`pheby.protocol.hub`.
"""

"""The index on PostgreSQL: the table `search_index` (pheby/migrations/0013_search_index.postgresql.sql) of
each row's terms as a tsvector, with a GIN index; its terms are written from Python's tokens
(`pheby.search.documents`). A query is the grammar's terms as a tsquery literal (`tsquery`): the words
quoted, `<->` between a phrase's words, `:*` after a prefix, `&` between terms. It is bound as a parameter
and cast, not parsed by a text search configuration: its lexemes are the index's, folded the same way.
"""

from collections.abc import Sequence

from pheby.db import Connection, Database
from pheby.search.documents import index_pending, quoted, wanted
from pheby.search.engine import IndexEngine
from pheby.search.query import SearchQuery, Term


def term_tsquery(term: Term) -> str:
    """One term: its words in order, adjacent (`<->`); the last `:*` for a prefix."""
    return " <-> ".join(quoted(word) for word in term.words) + (":*" if term.prefix else "")


def tsquery(query: SearchQuery) -> str:
    """Every term must match: `&` between them (each in parentheses: `<->` binds tighter, but plainly so)."""
    return " & ".join(f"({term_tsquery(term)})" for term in query.terms)


class PostgresIndex(IndexEngine):
    def __init__(self, db: Database) -> None:
        db.add_commit_step(index_pending)  # every writer's transaction indexes what it wrote

    async def prepare(self, db: Database) -> None:
        """Terms for rows a write outside the stores left pending (the stores index their own)."""
        if await db.run(lambda c: c.execute("SELECT 1 FROM search_index WHERE terms IS NULL LIMIT 1").fetchone()):
            await db.transaction(index_pending)

    def matching(self, conn: Connection, query: SearchQuery, low: int, high: int, limit: int) -> list[int]:
        rows = conn.execute(
            "SELECT id FROM search_index WHERE terms @@ ?::tsquery AND id >= ? AND id < ? ORDER BY id DESC LIMIT ?",
            (tsquery(query), low, high, limit),
        ).fetchall()
        return [rowid for (rowid,) in rows]

    def lengths(self, conn: Connection, rowids: Sequence[int]) -> dict[int, int]:
        ids = wanted(conn, rowids)
        rows = conn.execute(
            f"SELECT i.id, i.length FROM {ids.table} {ids.join} search_index i ON i.id = wanted.value "  # noqa: S608
            "WHERE i.length IS NOT NULL",
            (ids.parameter,),
        )
        return {int(rowid): int(length) for rowid, length in rows}

    def average_length(self, conn: Connection) -> float:
        row = conn.execute("SELECT documents, tokens FROM search_totals").fetchone()
        if row is None or row[0] <= 0:
            return 0.0
        return int(row[1]) / int(row[0])

"""The index on PostgreSQL: the table `search_index` (pheby/migrations/0013_search_index.postgresql.sql) of
each row's terms as a tsvector, with a GIN index; its terms are written from Python's tokens
(`pheby.search.documents`). Matches are read newest slice of ids first (`PostgresIndex.matching`). A query
is the grammar's terms as a tsquery literal (`tsquery`): the words quoted, `<->` between a phrase's words,
`:*` after a prefix, `&` between terms. It is bound as a parameter and cast, not parsed by a text search
configuration: its lexemes are the index's, folded the same way.
"""

from collections.abc import Sequence
from typing import Final

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


SLICE_FIRST: Final = 1024  # ids of the newest slice a search reads, at least
SLICE_PER_MATCH: Final = 4  # …or this many per match wanted
SLICE_GROWTH_EMPTY: Final = 8  # how much wider the next slice is when one held no match


class PostgresIndex(IndexEngine):
    def __init__(self, db: Database) -> None:
        db.add_commit_step(index_pending)  # every writer's transaction indexes what it wrote

    async def prepare(self, db: Database) -> None:
        """Terms for rows a write outside the stores left pending (the stores index their own)."""
        if await db.run(lambda c: c.execute("SELECT 1 FROM search_pending LIMIT 1").fetchone()):
            await db.transaction(index_pending)

    def matching(self, conn: Connection, query: SearchQuery, low: int, high: int, limit: int) -> list[int]:
        """Newest slice first: the rows under `high` are read in slices of ids, each older than the last and
        larger (by the share of matches found so far), until `limit` matches are found or `low` is reached.
        A slice's plan intersects the GIN index's rows of the query with the key's id range (or, for a
        narrow slice, walks the key and tests each row), so a common term reads about `limit` of its rows,
        not all the partition holds. A slice starts at the newest row under the last (the key's max), so
        the gap between the account's message and label ranges costs nothing."""
        expression = tsquery(query)
        found: list[int] = []
        span = max(SLICE_FIRST, limit * SLICE_PER_MATCH)
        while len(found) < limit:
            top = conn.execute("SELECT max(id) FROM search_index WHERE id >= ? AND id < ?", (low, high)).fetchone()[0]
            if top is None:
                break
            bottom = max(low, int(top) - span + 1)
            rows = conn.execute(
                "SELECT id FROM search_index WHERE id BETWEEN ? AND ? AND terms @@ ?::tsquery ORDER BY id DESC LIMIT ?",
                (bottom, int(top), expression, limit - len(found)),
            ).fetchall()
            found.extend(rowid for (rowid,) in rows)
            if bottom <= low:
                break
            high = bottom
            # The next slice: twice as wide, or as wide as this one's share of matches says the rest needs
            # (none found: `SLICE_GROWTH_EMPTY` times as wide, soon the whole partition, read by the GIN index).
            if rows:
                needed = (limit - len(found)) * (int(top) - bottom + 1) // len(rows)
                span = max(2 * span, needed * 5 // 4)
            else:
                span *= SLICE_GROWTH_EMPTY
        return found

    def lengths(self, conn: Connection, rowids: Sequence[int]) -> dict[int, int]:
        ids = wanted(conn, rowids)
        rows = conn.execute(
            f"SELECT i.id, i.length FROM {ids.table} {ids.join} search_index i ON i.id = wanted.value",  # noqa: S608
            (ids.parameter,),
        )
        return {int(rowid): int(length) for rowid, length in rows}

    def average_length(self, conn: Connection) -> float:
        row = conn.execute("SELECT documents, tokens FROM search_totals").fetchone()
        if row is None or row[0] <= 0:
            return 0.0
        return int(row[1]) / int(row[0])

"""The index on PostgreSQL: the table `search_index` (pheby/migrations/0013_search_index.postgresql.sql) of
each row's terms as a tsvector, with a GIN index; its terms are written from Python's tokens
(`pheby.search.documents`). A query is the grammar's terms as two tsquery literals, bound as parameters
and cast, not parsed by a text search configuration (their lexemes are the index's, folded the same way):
- what a row must hold (`tsquery`): each term's words, `<->` between a phrase's, `:*` after a prefix,
  `&` between the terms; a row is checked against it from its positions;
- what the GIN index is asked for (`lookup_tsquery`): each phrase's word pairs (`pheby.search.word_pairs`)
  instead of its words, so a phrase of common words reads the short lists of its pairs, not the long
  lists of its words (and not every row holding both, where they are seldom adjacent).

Matches are read newest first (`PostgresIndex.matching`), by whichever of two reads costs less for the
term: a walk down the key, testing each row, costs what the rows walked cost, so it suits a term found
often; the GIN index gives every row holding the term at once, wherever it is, so it suits a rare one.
Short walks first measure how often the term occurs, and that decides, with the planner's estimate of
how many rows the index would give as a second opinion (`_newest`).
"""

import functools
import math
from collections.abc import Sequence
from typing import Final

from pheby.db import Connection, Database
from pheby.search.documents import (
    MESSAGE_ROWS,
    PARTITION_ROWS,
    PENDING_BATCH,
    document_texts,
    index_pending,
    index_written,
    quoted,
    range_lexeme,
)
from pheby.search.engine import IndexEngine
from pheby.search.query import SearchQuery, Term
from pheby.search.tokens import token_count
from pheby.search.word_pairs import pair_lexemes


def term_tsquery(term: Term) -> str:
    """What a row must hold for one term: its words in order, adjacent (`<->`), the last `:*` for a prefix."""
    return " <-> ".join(quoted(word) for word in term.words) + (":*" if term.prefix else "")


def term_lookup(term: Term) -> str:
    """What the GIN index is asked for one term: the lexemes of the pairs of its whole words, or the word
    if it has no pair; and a prefix, as such. Every row holding the term holds these."""
    whole = term.words[:-1] if term.prefix else term.words
    lexemes = [quoted(lexeme) for lexeme in pair_lexemes(whole)] or [quoted(word) for word in whole]
    if term.prefix:
        lexemes.append(quoted(term.words[-1]) + ":*")
    return " & ".join(lexemes)


def tsquery(query: SearchQuery) -> str:
    """Every term must match: `&` between them (each in parentheses: `<->` binds tighter, but plainly so)."""
    return " & ".join(f"({term_tsquery(term)})" for term in query.terms)


def lookup_tsquery(query: SearchQuery) -> str:
    return " & ".join(f"({term_lookup(term)})" for term in query.terms)


WALK_FIRST: Final = 1024  # rows of the first walk, at least…
WALK_PER_MATCH: Final = 4  # …or this many per match wanted
WALK_MARGIN: Final = 2  # a walk may go this much further than the share of matches so far says it needs…
WALK_GROWTH: Final = 4  # …and at most this many times as far as all walks before it
GIN_ROW_COST: Final = 8  # a row the GIN index gives costs about as much as this many rows walked…
GIN_READ_ROWS: Final = 4096  # …after the index's own read of the terms' lists


class PostgresIndex(IndexEngine):
    def __init__(self, db: Database) -> None:
        db.add_commit_step(index_written)  # every writer's transaction indexes what it wrote

    async def prepare(self, db: Database) -> None:
        """Terms for rows a write outside the stores left pending (the stores index their own), or a migration
        queued: a batch to a transaction, so writers wait for that much at most, not for a whole backfill."""
        if await db.run(lambda c: c.execute("SELECT 1 FROM search_pending LIMIT 1").fetchone()):
            while await db.transaction(functools.partial(index_pending, batches=1)) == PENDING_BATCH:
                pass

    def matching(self, conn: Connection, query: SearchQuery, low: int, high: int, limit: int) -> list[int]:
        """The partition's labels, then its messages: each range is read on its own, as its own share of
        matches says (a word seldom in conversations' names may be common in their messages)."""
        terms = _Terms(query)
        labels = (high - 1) // PARTITION_ROWS * PARTITION_ROWS + MESSAGE_ROWS
        found = _newest(conn, terms, max(low, labels), high, limit) if high > labels else []
        if len(found) < limit and low < labels:
            found += _newest(conn, terms, low, min(high, labels), limit - len(found))
        return found

    def documents(self, conn: Connection, rowids: Sequence[int]) -> tuple[dict[int, str], dict[int, int]]:
        """The rows' texts; their lengths counted from them, as `terms` counted them (the index's lengths
        are the same numbers, in another table's rows, scattered as the matches are)."""
        texts = document_texts(conn, rowids)
        return texts, {rowid: token_count(text) for rowid, text in texts.items()}

    def average_length(self, conn: Connection) -> float:
        row = conn.execute("SELECT documents, tokens FROM search_totals").fetchone()
        if row is None or row[0] <= 0:
            return 0.0
        return int(row[1]) / int(row[0])


class _Terms:
    """A query's two tsquery literals (`tsquery`, `lookup_tsquery`), and what the planner expects of it,
    asked for once, when a read must first choose."""

    def __init__(self, query: SearchQuery) -> None:
        self.check = tsquery(query)
        self.lookup = lookup_tsquery(query)
        self._expected: tuple[float, int] | None = None

    def expected(self, conn: Connection) -> tuple[float, int]:
        """The share of the index's rows the planner expects the GIN index to give for the lookup (from the
        statistics ANALYZE keeps of the column's lexemes, over every account's rows; the walk measures
        the range's), and how many rows the index holds."""
        if self._expected is None:
            plan = conn.execute(
                "EXPLAIN (FORMAT JSON) SELECT id FROM search_index WHERE terms @@ ?::tsquery", (self.lookup,)
            ).fetchone()[0]
            totals = conn.execute("SELECT documents FROM search_totals").fetchone()
            documents = max(1, int(totals[0])) if totals is not None else 1
            self._expected = min(1.0, max(1.0, float(plan[0]["Plan"]["Plan Rows"])) / documents), documents
        return self._expected


def _newest(conn: Connection, terms: _Terms, low: int, high: int, limit: int) -> list[int]:
    """The newest `limit` rows in [low, high) matching, the range's rows numbered upward from `low`.

    It walks down the key from the range's newest row, and measures the term's share of the rows walked.
    While that share says the rest is nearer than the GIN index's rows would cost, the walk goes on to
    the rest. Otherwise the rest is read from the index: at once if the planner's expected share
    (`_Terms.expected`) says so too; else the walk first goes on until it has cost as much as the index
    would (the share is a guess from few rows at first, and a rare-looking term may be common in this
    account), so a search costs at most about twice the cheaper of the two reads, whichever the term."""
    newest = conn.execute(
        "SELECT id FROM search_index WHERE id >= ? AND id < ? ORDER BY id DESC LIMIT 1", (low, high)
    ).fetchone()
    if newest is None:
        return []
    found: list[int] = []
    top, rows, walked = int(newest[0]), max(WALK_FIRST, limit * WALK_PER_MATCH), 0
    while True:
        bottom = max(low, top - rows + 1)
        # The subquery's LIMIT keeps the match out of it: the planner walks the key and tests each row.
        found += [
            rowid
            for (rowid,) in conn.execute(
                "SELECT id FROM (SELECT id, terms FROM search_index WHERE id BETWEEN ? AND ? "
                "ORDER BY id DESC LIMIT ?) walked WHERE terms @@ ?::tsquery LIMIT ?",
                (bottom, top, top - bottom + 1, terms.check, limit - len(found)),
            )
        ]
        walked += top - bottom + 1
        if len(found) >= limit or bottom <= low:
            return found
        top = bottom - 1
        left, wanting, share = top - low, limit - len(found), (len(found) + 1) / walked
        walk = min(left, wanting / share)
        rows = int(wanting / share * WALK_MARGIN) + 1  # a walk stops at its last match wanted
        if walk > _index_cost(share * left):  # the index may cost less: as much as the rows it reads
            # It gives every row holding the lookup's lexemes in what it reads (`_covered`): the matches,
            # and rows where a phrase's words are not adjacent or a pair's lexeme is another pair's.
            expected, documents = terms.expected(conn)
            covered = _covered(low, int(newest[0]), documents)
            index = _index_cost(max(share * left, expected * covered))
            if walk > index:
                if walked >= index or min(left, wanting / expected) > index:
                    return found + _holding(conn, terms, low, top + 1, wanting, whole=covered == documents)
                rows = math.ceil(index - walked)  # the planner disagrees: walk on until it has cost the index's
        rows = min(rows, walked * WALK_GROWTH)


def _index_cost(rows: float) -> float:
    """What the GIN index costs for `rows` rows it gives, in rows walked."""
    return GIN_ROW_COST * rows + GIN_READ_ROWS


def _covered(low: int, newest: int, documents: int) -> int:
    """About how many rows the GIN index reads for a range from `low` to `newest`: its lexeme's (the
    account's messages, or its labels, `range_lexeme`; numbered upward from the first), or every row of
    the index where that is most of it. More than the range itself where it is part of the lexeme's."""
    lexeme_rows = newest - low // MESSAGE_ROWS * MESSAGE_ROWS
    return lexeme_rows if 2 * lexeme_rows < documents else documents


def _holding(conn: Connection, terms: _Terms, low: int, high: int, limit: int, *, whole: bool) -> list[int]:
    """The newest `limit` rows of [low, high) holding the terms, from the GIN index alone: it is asked for
    `terms.lookup`, and each row it gives is checked against `terms.check` (`ts_match_vq` is `@@` as a
    function, which the index can't take). MATERIALIZED: the planner would otherwise also intersect the
    key's range, which for a large range costs more than the rows. Unless the range's part of the index
    is most of it (`whole`), the range's lexeme (`range_lexeme`) keeps the index to that part; where it
    is, the lexeme's long list costs more than the other rows."""
    lookup = terms.lookup if whole else f"{quoted(range_lexeme(low))} & {terms.lookup}"
    return [
        rowid
        for (rowid,) in conn.execute(
            "WITH holding AS MATERIALIZED (SELECT id FROM search_index "
            "WHERE terms @@ ?::tsquery AND ts_match_vq(terms, ?::tsquery)) "
            "SELECT id FROM holding WHERE id >= ? AND id < ? ORDER BY id DESC LIMIT ?",
            (lookup, terms.check, low, high, limit),
        )
    ]

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
Short walks first measure how often the term occurs, and that decides (`_newest`).
"""

import math
from collections.abc import Sequence
from typing import Final, NamedTuple

from pheby.db import Connection, Database
from pheby.search.documents import (
    MESSAGE_ROWS,
    PARTITION_ROWS,
    PENDING_BATCH,
    index_written,
    is_message,
    quoted,
    range_lexeme,
    wanted,
)
from pheby.search.engine import IndexEngine
from pheby.search.query import SearchQuery, Term
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
        queued: a batch or two to a transaction (its own and the commit step's), so writers wait for that
        much at most, not for a whole backfill."""
        if await db.run(lambda c: c.execute("SELECT 1 FROM search_pending LIMIT 1").fetchone()):
            while await db.transaction(index_written) == PENDING_BATCH:
                pass

    def matching(self, conn: Connection, query: SearchQuery, low: int, high: int, limit: int) -> list[int]:
        """The partition's labels, then its messages: each range is read on its own, as its own share of
        matches says (a word seldom in conversations' names may be common in their messages)."""
        terms = _Terms(tsquery(query), lookup_tsquery(query))
        labels = (high - 1) // PARTITION_ROWS * PARTITION_ROWS + MESSAGE_ROWS
        found = _newest(conn, terms, max(low, labels), high, limit) if high > labels else []
        if len(found) < limit and low < labels:
            found += _newest(conn, terms, low, min(high, labels), limit - len(found))
        return found

    def lengths(self, conn: Connection, rowids: Sequence[int]) -> dict[int, int]:
        ids = wanted(conn, rowids)
        rows = conn.execute(
            f"SELECT i.id, i.length FROM {ids.table} {ids.join} search_index i ON i.id = wanted.value",  # noqa: S608
            (ids.parameter,),
        )
        return {int(rowid): int(length) for rowid, length in rows}

    def documents(self, conn: Connection, rowids: Sequence[int]) -> tuple[dict[int, str], dict[int, int]]:
        """A message's text and length in one read (most rows are messages); the labels' as the engine's."""
        texts: dict[int, str] = {}
        sizes: dict[int, int] = {}
        if messages := [rowid for rowid in rowids if is_message(rowid)]:
            ids = wanted(conn, messages)
            for rowid, text, length in conn.execute(
                f"SELECT h.id, h.text, i.length FROM {ids.table} "  # noqa: S608 - `wanted`'s constant SQL
                "JOIN history_log h ON h.id = wanted.value JOIN search_index i ON i.id = h.id",
                (ids.parameter,),
            ):
                texts[int(rowid)], sizes[int(rowid)] = text, int(length)
        labels = [rowid for rowid in rowids if not is_message(rowid)]
        if labels:
            label_texts, label_sizes = super().documents(conn, labels)
            texts.update(label_texts)
            sizes.update(label_sizes)
        return texts, sizes

    def average_length(self, conn: Connection) -> float:
        row = conn.execute("SELECT documents, tokens FROM search_totals").fetchone()
        if row is None or row[0] <= 0:
            return 0.0
        return int(row[1]) / int(row[0])


class _Terms(NamedTuple):
    check: str  # `tsquery`
    lookup: str  # `lookup_tsquery`


def _newest(conn: Connection, terms: _Terms, low: int, high: int, limit: int) -> list[int]:
    """The newest `limit` rows in [low, high) matching, the range's rows numbered upward from `low`.

    It walks down the key from the range's newest row, and measures the term's share of the rows walked.
    While that share says the rest is nearer than the GIN index's rows would cost (`gin`), the walk goes
    on to the rest. Otherwise it goes on only until it has cost as much as the index would (the share is
    a guess from few rows at first, and a rare-looking term may be common), then the rest is read from
    the index: so a search costs at most about twice the cheaper of the two, whichever the term."""
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
        left, share = top - low, (len(found) + 1) / walked
        needed = (limit - len(found)) / share
        gin = GIN_ROW_COST * share * left + GIN_READ_ROWS
        if min(left, needed) <= gin:
            rows = int(needed * WALK_MARGIN) + 1  # a walk stops at its last match wanted
        elif walked < gin:
            rows = math.ceil(gin - walked)
        else:
            return found + _holding(conn, terms, low, top + 1, limit - len(found), rows=left)
        rows = min(rows, walked * WALK_GROWTH)


def _holding(conn: Connection, terms: _Terms, low: int, high: int, limit: int, *, rows: int) -> list[int]:
    """The newest `limit` rows of [low, high) holding the terms, from the GIN index alone: it is asked for
    `terms.lookup`, and each row it gives is checked against `terms.check` (`ts_match_vq` is `@@` as a
    function, which the index can't take). MATERIALIZED: the planner would otherwise also intersect the
    key's range, which for a large range costs more than the rows. Where the range (about `rows` rows) is
    a small part of the index, the range's lexeme (`range_lexeme`) keeps the index to its rows; where it
    is most of it, the lexeme's long list costs more than the other rows."""
    lookup = terms.lookup
    documents = conn.execute("SELECT documents FROM search_totals").fetchone()
    if documents is not None and 2 * rows < int(documents[0]):
        lookup = f"{quoted(range_lexeme(low))} & {lookup}"
    return [
        rowid
        for (rowid,) in conn.execute(
            "WITH holding AS MATERIALIZED (SELECT id FROM search_index "
            "WHERE terms @@ ?::tsquery AND ts_match_vq(terms, ?::tsquery)) "
            "SELECT id FROM holding WHERE id >= ? AND id < ? ORDER BY id DESC LIMIT ?",
            (lookup, terms.check, low, high, limit),
        )
    ]

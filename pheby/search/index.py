"""Searching an account's part of the full-text index (`search_index`, kept by the triggers of
pheby/migrations/0013_search_index.sql, or of its PostgreSQL variant), and turning its rows into results
with snippets. What differs between the engines is how rows matching a query are found and how long the
rows are (`engine`: `sqlite_index`'s FTS5, `postgres_index`'s tsvector); the rows, their numbering
(`pheby.search.documents`), the paging, the ranking and the results are the same on both.

Ranking is BM25, over windows of the account's matching rows, newest first: a page ranks the
newest `window` matches (all of them, unless a term is very common) and pages through them by
rank; once a window is read, the next cursor goes on to the next older window. So a search reads
at most `window` rows of the index however much the account holds, the best match of a window
comes first, and every match is reachable. The window is ranked by `pheby.search.ranking` rather
than FTS5's `bm25()`, whose count of each term over the whole table (every account's rows) costs
hundreds of milliseconds for a phrase of common words: a single term in `bm25()`'s own order; several
terms weighted by IDFs estimated from the account's newest rows (`_idf`). Only the caller's
partition of the index is read (a rowid range), so another account's rows are never candidates.
"""

import re
import time
from collections.abc import Callable, Sequence
from typing import Final, Literal, NamedTuple

import msgspec

from pheby.db import Connection, Database
from pheby.errors import BadRequest
from pheby.protocol.frames import SearchHitAttachment, SearchResult, iso_utc
from pheby.search.documents import MESSAGE_ROWS, PARTITION_ROWS, is_message, wanted
from pheby.search.engine import IndexEngine
from pheby.search.query import SearchQuery, Term, parse_query
from pheby.search.ranking import Ranker, idf, lookup_query, lookup_term
from pheby.search.snippets import highlights, snippet

__all__ = ["CURSOR_PATTERN", "MESSAGE_ROWS", "PAGE_DEFAULT", "PAGE_MAX", "PARTITION_ROWS", "SearchIndex", "SearchPage"]

PAGE_MAX: Final = 50
PAGE_DEFAULT: Final = 20
WINDOW: Final = 500  # index rows ranked at a time
IDF_SAMPLE: Final = 64  # a term's newest rows read to estimate its IDF (its share, to within about an eighth)…
IDF_ROWS: Final = 32_768  # …among at most this many of the account's newest messages
WINDOWS_PER_PAGE: Final = 8  # windows read for one page when a window's candidates hold no match
CURSOR_PATTERN = r"^\d{1,19}\.\d{1,6}$"  # what `next_cursor` looks like: the OpenAPI document says so too
_CURSOR = re.compile(r"(\d{1,19})\.(\d{1,6})")
_MESSAGE_ID = re.compile(r"m\d{1,18}")


class SearchPage(msgspec.Struct, frozen=True):
    results: list[SearchResult]
    next_cursor: str | None  # pass back as `cursor` for the next page; None: no more


class _Window(msgspec.Struct, frozen=True):
    first: int  # the account's partition
    below: int  # the window holds the matching rows under this one
    offset: int  # where in the window's ranking the page starts


class SearchIndex:
    def __init__(self, db: Database, *, window: int = WINDOW, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._engine = _engine(db)
        self._window = window
        self._clock = clock

    async def prepare(self) -> None:
        """Bring the index up to what is committed (on PostgreSQL: the terms of queued rows, as a migration
        leaves them). A search does it before it reads; the server does it as it starts, before it serves."""
        await self._engine.prepare(self._db)

    async def search(
        self, account_id: str, text: str, *, limit: int = PAGE_DEFAULT, cursor: str | None = None
    ) -> SearchPage:
        """A page of the account's results for `text` (the grammar of `pheby.search.query`), best first.

        `BadRequest` for a query outside the grammar or a cursor this search did not give out."""
        query = parse_query(text)
        limit = max(1, min(limit, PAGE_MAX))
        await self._engine.prepare(self._db)
        return await self._db.run(lambda conn: self._page(conn, account_id, query, limit, cursor))

    def _page(
        self, conn: Connection, account_id: str, query: SearchQuery, limit: int, cursor: str | None
    ) -> SearchPage:
        row = conn.execute("SELECT number FROM search_partitions WHERE account_id = ?", (account_id,)).fetchone()
        if row is None:
            return SearchPage(results=[], next_cursor=None)
        first = int(row[0]) * PARTITION_ROWS
        at = self._window_at(first, cursor)
        if at is None:  # a cursor past what the index holds now (rebuilt since): nothing more to show
            return SearchPage(results=[], next_cursor=None)
        ranker: Ranker | None = None  # made at the first candidates: what it weighs by holds for the page
        below, offset, pinned = at.below, at.offset, cursor is not None
        for _ in range(WINDOWS_PER_PAGE):
            candidates = self._candidates(conn, query, first, below)
            if candidates:
                if not pinned:
                    below = candidates[0] + 1  # later pages keep this window
                ranker = ranker or self._ranker(conn, first, query)
                texts, sizes = self._engine.documents(conn, candidates)
                ranked = ranker.ranked(candidates, texts, sizes)
            else:
                ranked = []
            shown = ranked[offset : offset + limit]
            if offset + limit < len(ranked):
                next_cursor: str | None = f"{below}.{offset + limit}"
            elif len(candidates) == self._window:
                next_cursor = f"{candidates[-1]}.0"  # the next, older window
            else:
                next_cursor = None
            if shown or next_cursor is None:
                break
            # None of this window's candidates was a match (a long prefix's): read the next window.
            below, offset, pinned = candidates[-1], 0, True
        results = _results(conn, account_id, query, shown, self._clock())
        return SearchPage(results=results, next_cursor=next_cursor)

    def _candidates(self, conn: Connection, query: SearchQuery, first: int, below: int) -> list[int]:
        """The rowids of the window's rows the index finds, newest first (ranked by `Ranker`)."""
        return self._engine.matching(conn, lookup_query(query), first, below, self._window)

    def _ranker(self, conn: Connection, first: int, query: SearchQuery) -> Ranker:
        """The query's ranker, with the index's average row length and, for several terms, their IDFs."""
        average = self._engine.average_length(conn)
        if len(query.terms) == 1:
            return Ranker(query, average)
        newest = conn.execute(
            "SELECT max(id) FROM history_log WHERE id >= ? AND id < ?", (first, first + MESSAGE_ROWS)
        ).fetchone()[0]
        weights = [1.0 if newest is None else self._idf(conn, first, int(newest), term) for term in query.terms]
        return Ranker(query, average, weights)

    def _idf(self, conn: Connection, first: int, newest: int, term: Term) -> float:
        """The term's IDF in the account's messages, from how densely it occurs in the newest of them: of
        the account's messages (their rows are numbered in the order they were logged, up to `newest`),
        the newest `IDF_SAMPLE` holding the term span so many rows, and that share of all of them is its
        estimated count. A term too rare for that among the newest `IDF_ROWS` messages is counted there,
        and its share of them taken (exact where they are all of the account's). Reading only that far
        keeps its cost bounded, where bm25()'s count reads every row of the whole table holding it."""
        rows = newest - first
        read = min(rows, IDF_ROWS)
        query = SearchQuery((lookup_term(term),))
        holding = self._engine.matching(conn, query, newest - read + 1, newest + 1, IDF_SAMPLE)
        if len(holding) < IDF_SAMPLE:
            return idf(rows, len(holding) * rows / read)
        return idf(rows, IDF_SAMPLE * rows / (newest - holding[-1] + 1))

    def _window_at(self, first: int, cursor: str | None) -> _Window | None:
        """Where a page starts: the newest window, or the cursor's; None for a well-formed cursor that points
        outside the account's index (as documented, any `CURSOR_PATTERN` is a valid cursor: it may end the list)."""
        if cursor is None:
            return _Window(first=first, below=first + PARTITION_ROWS, offset=0)
        found = _CURSOR.fullmatch(cursor)
        if found is None:
            raise BadRequest("The cursor is not one this search gave out")
        below, offset = int(found[1]), int(found[2])
        if not first < below <= first + PARTITION_ROWS or offset >= self._window:
            return None
        return _Window(first=first, below=below, offset=offset)


class _MessageRow(NamedTuple):
    conversation_id: str
    conversation_name: str
    hermes_id: int
    role: Literal["user", "assistant"]
    text: str
    ts: str | None


class _LabelRow(NamedTuple):
    conversation_id: str
    conversation_name: str
    conversation_active: float
    attachment_id: str | None  # None: the conversation's name
    filename: str | None
    text: str | None
    direction: str | None
    message_id: str | None
    created_at: float | None
    expires_at: float | None


def _engine(db: Database) -> IndexEngine:
    if db.engine == "postgresql":
        from pheby.search.postgres_index import PostgresIndex

        return PostgresIndex(db)
    from pheby.search.sqlite_index import SqliteIndex

    return SqliteIndex()


def _results(
    conn: Connection, account_id: str, query: SearchQuery, rowids: Sequence[int], now: float
) -> list[SearchResult]:
    """The rows' results in the rows' order; a row whose conversation or attachment is gone is left out."""
    messages = _message_rows(conn, account_id, [rowid for rowid in rowids if is_message(rowid)])
    labels = _label_rows(conn, account_id, [rowid for rowid in rowids if not is_message(rowid)])
    results: list[SearchResult] = []
    for rowid in rowids:
        if is_message(rowid):
            if (message := messages.get(rowid)) is not None:
                results.append(_message_result(message, query))
        elif (label := labels.get(rowid)) is not None and (result := _label_result(label, query, now)) is not None:
            results.append(result)
    return results


def _message_rows(conn: Connection, account_id: str, rowids: Sequence[int]) -> dict[int, _MessageRow]:
    if not rowids:  # most pages hold rows of one kind: the other's tables are not read
        return {}
    ids = wanted(conn, rowids)
    return {
        r[0]: _MessageRow(*r[1:])
        for r in conn.execute(
            # CROSS JOIN: the rows by their ids first (else the planner may walk the account's conversations).
            "SELECT h.id, h.conversation_id, c.name, h.hermes_id, h.role, h.text, h.ts "  # noqa: S608 - constant SQL
            f"FROM {ids.table} {ids.join} history_log h ON h.id = wanted.value "
            f"{ids.join} conversations c ON c.id = h.conversation_id AND c.account_id = ?",
            (ids.parameter, account_id),
        )
    }


def _label_rows(conn: Connection, account_id: str, rowids: Sequence[int]) -> dict[int, _LabelRow]:
    if not rowids:
        return {}
    ids = wanted(conn, rowids)
    return {
        r[0]: _LabelRow(*r[1:])
        for r in conn.execute(
            "SELECT l.id, l.conversation_id, c.name, COALESCE(c.last_active, c.created_at), "  # noqa: S608 - constant SQL
            "a.id, a.filename, a.extracted_text, a.direction, a.message_id, a.created_at, a.expires_at "
            f"FROM {ids.table} {ids.join} search_labels l ON l.id = wanted.value "
            f"{ids.join} conversations c ON c.id = l.conversation_id AND c.account_id = ? "
            "LEFT JOIN attachments a ON a.id = l.attachment_id",
            (ids.parameter, account_id),
        )
    }


def _message_result(message: _MessageRow, query: SearchQuery) -> SearchResult:
    excerpt, ranges = snippet(message.text, highlights(message.text, query))
    return SearchResult(
        conversation_id=message.conversation_id,
        conversation_name=message.conversation_name,
        message_id=f"m{message.hermes_id}",
        role=message.role,
        ts=message.ts,
        snippet=excerpt,
        highlights=ranges,
        kind="message",
        attachment=None,
    )


def _label_result(label: _LabelRow, query: SearchQuery, now: float) -> SearchResult | None:
    name = label.conversation_name
    if label.attachment_id is None:
        excerpt, ranges = snippet(name, highlights(name, query))
        return SearchResult(
            conversation_id=label.conversation_id,
            conversation_name=name,
            message_id=None,
            role=None,
            ts=iso_utc(label.conversation_active, "seconds"),
            snippet=excerpt,
            highlights=ranges,
            kind="name",
            attachment=None,
        )
    if label.filename is None or label.text is None or (label.expires_at is not None and label.expires_at <= now):
        return None  # tombstoned meanwhile, or expired and not yet swept: no longer the account's to open
    ranges = highlights(label.text, query)
    excerpt, shown = (
        snippet(label.text, ranges) if ranges else snippet(label.filename, highlights(label.filename, query))
    )
    message_id = label.message_id
    return SearchResult(
        conversation_id=label.conversation_id,
        conversation_name=name,
        message_id=message_id if message_id is not None and _MESSAGE_ID.fullmatch(message_id) else None,
        role="user" if label.direction == "inbound" else "assistant",
        ts=iso_utc(label.created_at, "seconds"),
        snippet=excerpt,
        highlights=shown,
        kind="attachment",
        attachment=SearchHitAttachment(attachment_id=label.attachment_id, filename=label.filename),
    )

"""Searching an account's part of the full-text index (`search_index`, kept by the triggers of
pheby/migrations/0013_search_index.sql), and turning its rows into results with snippets.

Ranking is BM25, over windows of the account's matching rows, newest first: a page ranks the
newest `window` matches (all of them, unless a term is very common) and pages through them by
rank; once a window is read, the next cursor goes on to the next older window. A new window is read
in slices of the account's rows, newest first (`slice_rows`, doubling up to `SLICE_ROWS_MAX`), until
it holds `window` matches, the rows run out, or `budget` seconds are spent: a phrase of common
words that seldom stand together would otherwise read the whole account before answering. So a
search reads a bounded part of the index however much the account holds; a page may hold fewer
results than asked (none, even) and still a `next_cursor`, which goes on to older rows. The best
match of a window comes first, and every match is reachable. Only the caller's partition of the
index is read (a rowid range), so another account's rows are never candidates.
"""

import re
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Final, Literal, NamedTuple

import msgspec

from pheby.db import Database
from pheby.errors import BadRequest
from pheby.protocol.frames import SearchHitAttachment, SearchResult, iso_utc
from pheby.search.query import SearchQuery, parse_query
from pheby.search.snippets import highlights, snippet

PAGE_MAX: Final = 50
PAGE_DEFAULT: Final = 20
WINDOW: Final = 500  # index rows ranked at a time
SLICE_ROWS: Final = 8192  # the account's rows a new window reads first; each next slice twice as many
SLICE_ROWS_MAX: Final = 1 << 16
BUDGET_SECONDS: Final = 0.025  # a new window reads slices until this is spent
PARTITION_ROWS: Final = 1 << 40  # an account's range of index rows: messages, then labels
MESSAGE_ROWS: Final = 1 << 39
_CURSOR = re.compile(r"(\d{1,19})(?:\.(\d{1,19})\.(\d{1,6}))?")  # below[.low.offset]
_MESSAGE_ID = re.compile(r"m\d{1,18}")


class SearchPage(msgspec.Struct, frozen=True):
    results: list[SearchResult]
    next_cursor: str | None  # pass back as `cursor` for the next page; None: no more


class _Window(msgspec.Struct, frozen=True):
    first: int  # the account's partition
    below: int  # the window holds the matching rows under this one
    low: int | None  # ... and from this one up (None: a new window, read until it is full or the budget spent)
    offset: int  # where in the window's ranking the page starts


class SearchIndex:
    def __init__(
        self,
        db: Database,
        *,
        window: int = WINDOW,
        slice_rows: int = SLICE_ROWS,
        budget: float = BUDGET_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._window = window
        self._slice_rows = slice_rows
        self._budget = budget
        self._clock = clock

    async def search(
        self, account_id: str, text: str, *, limit: int = PAGE_DEFAULT, cursor: str | None = None
    ) -> SearchPage:
        """A page of the account's results for `text` (the grammar of `pheby.search.query`), best first.

        `BadRequest` for a query outside the grammar or a cursor this search did not give out."""
        query = parse_query(text)
        limit = max(1, min(limit, PAGE_MAX))
        return await self._db.run(lambda conn: self._page(conn, account_id, query, limit, cursor))

    def _page(
        self, conn: sqlite3.Connection, account_id: str, query: SearchQuery, limit: int, cursor: str | None
    ) -> SearchPage:
        row = conn.execute("SELECT number FROM search_partitions WHERE account_id = ?", (account_id,)).fetchone()
        if row is None:
            return SearchPage(results=[], next_cursor=None)
        first = int(row[0]) * PARTITION_ROWS
        at = self._window_at(first, cursor)
        try:
            if at.low is None:
                matches, low = self._read_window(conn, query.match_expression(), first, at.below)
            else:
                low = at.low
                matches = conn.execute(_MATCHES, (query.match_expression(), low, at.below, self._window)).fetchall()
        except sqlite3.OperationalError:  # the index refused the expression: still the client's query
            raise BadRequest("This query can't be searched; try other words") from None
        below = matches[0][0] + 1 if at.low is None and matches else at.below  # later pages keep this window
        ranked = sorted(matches, key=lambda match: (match[1], -match[0]))
        shown = ranked[at.offset : at.offset + limit]
        if at.offset + limit < len(ranked):
            next_cursor: str | None = f"{below}.{low}.{at.offset + limit}"
        elif low > first:
            next_cursor = str(low)  # the next, older window
        else:
            next_cursor = None
        results = _results(conn, account_id, first, query, [rowid for rowid, _ in shown], self._clock())
        return SearchPage(results=results, next_cursor=next_cursor)

    def _read_window(
        self, conn: sqlite3.Connection, expression: str, first: int, below: int
    ) -> tuple[list[tuple[int, float]], int]:
        """The newest matches under `below` (at most `window`), read slice by slice within the budget, and
        the lowest row read (`first`: every row of the account was)."""
        matches: list[tuple[int, float]] = []
        deadline = time.perf_counter() + self._budget
        size, high = self._slice_rows, below
        while high > first:
            top = _newest_row(conn, first, high)  # past the gaps: rowids are sparse in the partition
            if top is None:
                return matches, first
            low = max(first, top + 1 - size)
            matches += conn.execute(_MATCHES, (expression, low, top + 1, self._window - len(matches))).fetchall()
            if len(matches) == self._window:
                return matches, matches[-1][0]  # full: the window ends at its oldest match
            high = low
            if time.perf_counter() >= deadline:
                break
            size = min(2 * size, SLICE_ROWS_MAX)
        return matches, high

    def _window_at(self, first: int, cursor: str | None) -> _Window:
        if cursor is None:
            return _Window(first=first, below=first + PARTITION_ROWS, low=None, offset=0)
        found = _CURSOR.fullmatch(cursor)
        if found is None:
            raise BadRequest("The cursor is not one this search gave out")
        below = int(found[1])
        low, offset = (None, 0) if found[2] is None else (int(found[2]), int(found[3]))
        if not first < below <= first + PARTITION_ROWS or offset >= self._window:
            raise BadRequest("The cursor is not one this search gave out")
        if low is not None and not first <= low < below:
            raise BadRequest("The cursor is not one this search gave out")
        return _Window(first=first, below=below, low=low, offset=offset)


_MATCHES: Final = (
    "SELECT rowid, bm25(search_index) FROM search_index "
    "WHERE search_index MATCH ? AND rowid >= ? AND rowid < ? ORDER BY rowid DESC LIMIT ?"
)


def _newest_row(conn: sqlite3.Connection, first: int, below: int) -> int | None:
    """The account's newest indexed row under `below` (a message or a label), from the tables' own keys."""
    row = conn.execute(_NEWEST_ROW, (first, below)).fetchone()
    return None if row is None or row[0] is None else int(row[0])


_NEWEST_ROW: Final = (
    "SELECT max(newest) FROM (SELECT max(id) AS newest FROM history_log WHERE id >= ?1 AND id < ?2 "
    "UNION ALL SELECT max(id) FROM search_labels WHERE id >= ?1 AND id < ?2)"
)


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


def _results(
    conn: sqlite3.Connection, account_id: str, first: int, query: SearchQuery, rowids: Sequence[int], now: float
) -> list[SearchResult]:
    """The rows' results in the rows' order; a row whose conversation or attachment is gone is left out."""
    ids = msgspec.json.encode(list(rowids)).decode()
    messages = {
        r[0]: _MessageRow(*r[1:])
        for r in conn.execute(
            # CROSS JOIN: the rows by their ids first (else the planner may walk the account's conversations).
            "SELECT h.id, h.conversation_id, c.name, h.hermes_id, h.role, h.text, h.ts FROM json_each(?) wanted "
            "CROSS JOIN history_log h ON h.id = wanted.value "
            "CROSS JOIN conversations c ON c.id = h.conversation_id AND c.account_id = ?",
            (ids, account_id),
        )
    }
    labels = {
        r[0]: _LabelRow(*r[1:])
        for r in conn.execute(
            "SELECT l.id, l.conversation_id, c.name, COALESCE(c.last_active, c.created_at), "
            "a.id, a.filename, a.extracted_text, a.direction, a.message_id, a.created_at, a.expires_at "
            "FROM json_each(?) wanted CROSS JOIN search_labels l ON l.id = wanted.value "
            "CROSS JOIN conversations c ON c.id = l.conversation_id AND c.account_id = ? "
            "LEFT JOIN attachments a ON a.id = l.attachment_id",
            (ids, account_id),
        )
    }
    results: list[SearchResult] = []
    for rowid in rowids:
        if rowid - first < MESSAGE_ROWS:
            if (message := messages.get(rowid)) is not None:
                results.append(_message_result(message, query))
        elif (label := labels.get(rowid)) is not None and (result := _label_result(label, query, now)) is not None:
            results.append(result)
    return results


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

"""The index on SQLite: the FTS5 table `search_index` (pheby/migrations/0013_search_index.sql), which its
triggers keep, tokenizing as they write. Rows are found by MATCH over the account's rowid range; lengths
and the average length are read from FTS5's own size records rather than by `bm25()` (`pheby.search.ranking`).
"""

import sqlite3
from collections.abc import Sequence

import msgspec

from pheby.db import Connection
from pheby.errors import BadRequest
from pheby.search.documents import document_texts
from pheby.search.engine import IndexEngine
from pheby.search.query import SearchQuery


class SqliteIndex(IndexEngine):
    def matching(self, conn: Connection, query: SearchQuery, low: int, high: int, limit: int) -> list[int]:
        try:
            rows = conn.execute(
                "SELECT rowid FROM search_index "
                "WHERE search_index MATCH ? AND rowid >= ? AND rowid < ? ORDER BY rowid DESC LIMIT ?",
                (query.match_expression(), low, high, limit),
            ).fetchall()
        except sqlite3.OperationalError:  # the index refused the expression: still the client's query
            raise BadRequest("This query can't be searched; try other words") from None
        return [rowid for (rowid,) in rows]

    def documents(self, conn: Connection, rowids: Sequence[int]) -> tuple[dict[int, str], dict[int, int]]:
        return document_texts(conn, rowids), _lengths(conn, rowids)

    def average_length(self, conn: Connection) -> float:
        """As `bm25()` reads it: from the averages record (row 1 of `search_index_data`: varints, the row
        count then each column's token total). 0.0 if the record is missing or unreadable."""
        row = conn.execute("SELECT block FROM search_index_data WHERE id = 1").fetchone()
        if row is None or not isinstance(row[0], bytes):
            return 0.0
        values = _varints(row[0], 2)
        if len(values) < 2 or values[0] <= 0:
            return 0.0
        return values[1] / values[0]


def _lengths(conn: Connection, rowids: Sequence[int]) -> dict[int, int]:
    """From `search_index_docsize`: a varint per column."""
    rows = conn.execute(
        "SELECT d.id, d.sz FROM json_each(?) w CROSS JOIN search_index_docsize d ON d.id = w.value",
        (msgspec.json.encode(list(rowids)).decode(),),
    )
    # Most rows are under 128 tokens: their varint is their first byte.
    return {
        rowid: size[0] if size[0] < 0x80 else _varints(size, 1)[0] for rowid, size in rows if isinstance(size, bytes)
    }


def _varints(data: bytes, count: int) -> list[int]:
    """SQLite's varints (big-endian 7-bit groups; a ninth byte holds 8 bits), the first `count`."""
    values: list[int] = []
    at = 0
    while len(values) < count and at < len(data):
        value = 0
        for i in range(9):
            if at >= len(data):
                return values
            byte = data[at]
            at += 1
            if i == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if byte < 0x80:
                break
        values.append(value)
    return values

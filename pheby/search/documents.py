"""The search index's rows and their text, on either engine; and, on PostgreSQL, the terms of new rows.

Which rows the index holds is kept by each engine's triggers, in the writer's transaction (SQLite:
pheby/migrations/0013_search_index.sql; PostgreSQL: its `.postgresql.sql` variant). A row is numbered in
its account's partition of `PARTITION_ROWS`: messages (history_log's id) in the lower `MESSAGE_ROWS`,
conversation names and attachments (search_labels) above; its text is read from where it is kept
(`document_texts`).

Tokenizing is Python's (`pheby.search.tokens`, the rule of FTS5's `unicode61 remove_diacritics 2`). SQLite's
FTS5 applies that rule itself, in the triggers. PostgreSQL can't: its parser and lower() follow the
database's locale, and would split and fold other text differently from the query's words. So there a
trigger queues a new or changed row (search_pending), and `index_pending` writes its terms, made here,
as a tsvector literal (the lexemes and positions as they are, no PostgreSQL parser in between). A batch
of it runs at the end of every transaction that queued rows (the queue's trigger sends a notice saying so),
before the commit (`index_written`, the commit step the PostgreSQL search engine registers with
`Database.add_commit_step`): so a write's terms are committed with it, and the stores, which know nothing
of the index, keep one SQL for both engines. A search runs it too, to the end of the queue, before it
reads (`postgres_index`): for rows a statement outside a transaction (or SQL run by hand) left pending, and
for a backfill (a migration queues every row), which writers take a batch of at a time rather than wait
for the whole.
"""

import itertools
from collections.abc import Iterable, Sequence
from typing import Any, Final, NamedTuple

import msgspec

from pheby.db import Connection
from pheby.search.tokens import tokens
from pheby.search.word_pairs import PAIRS_MAX_BYTES, pair_lexemes

PARTITION_ROWS: Final = 1 << 40  # an account's range of index rows: messages, then labels
MESSAGE_ROWS: Final = 1 << 39
LEXEME_MAX_BYTES: Final = 2046  # PostgreSQL's longest lexeme (a longer word is not indexed there)
POSITION_MAX: Final = 16383  # PostgreSQL's last position: later words are kept there (found, not in phrases)
POSITIONS_MAX: Final = 256  # positions a lexeme keeps in a tsvector
TSVECTOR_MAX_BYTES: Final = 1_000_000  # a tsvector's lexemes, at most (PostgreSQL refuses over 1 MiB)
WORDS_MAX_BYTES: Final = TSVECTOR_MAX_BYTES - PAIRS_MAX_BYTES - 32  # the rest: the pairs and the range always fit
PENDING_BATCH: Final = 10_000  # rows written by one statement (a backfill takes several)
QUEUED_NOTICE: Final = "pheby: rows queued for search"  # the queue's trigger's (0026_search_queued_notice)


def range_lexeme(rowid: int) -> str:
    """The lexeme every row of the row's range holds (an account's messages, or its labels), so the GIN
    index gives the range's rows alone: `#` (no word holds it) and the range's number."""
    return f"#{rowid // MESSAGE_ROWS}"


def is_message(rowid: int) -> bool:
    return rowid % PARTITION_ROWS < MESSAGE_ROWS


class Wanted(NamedTuple):
    """Rowids as a table `wanted (value)` to join rows to, for the engine: `FROM {table} {join} t ON …`."""

    table: str
    join: str  # SQLite's CROSS JOIN keeps this order (the rows by their ids); PostgreSQL's planner needs no hint
    parameter: Any


def wanted(conn: Connection, rowids: Iterable[int]) -> Wanted:
    ids = list(rowids)
    if conn.engine == "postgresql":
        return Wanted("unnest(?::bigint[]) wanted (value)", "JOIN", ids)
    return Wanted("json_each(?) wanted", "CROSS JOIN", msgspec.json.encode(ids).decode())


def document_texts(conn: Connection, rowids: Sequence[int]) -> dict[int, str]:
    """The text each index row was made of (a message, a conversation's name, an attachment's name and
    text), by rowid; a row gone meanwhile is missing."""
    message_rows = [r for r in rowids if is_message(r)]
    label_rows = [r for r in rowids if not is_message(r)]
    found: dict[int, str] = {}
    if message_rows:
        messages = wanted(conn, message_rows)
        found.update(
            conn.execute(
                f"SELECT h.id, h.text FROM {messages.table} {messages.join} history_log h ON h.id = wanted.value",  # noqa: S608
                (messages.parameter,),
            ).fetchall()
        )
    if label_rows:
        labels = wanted(conn, label_rows)
        found.update(
            conn.execute(
                "SELECT l.id, CASE WHEN l.attachment_id IS NULL THEN c.name "  # noqa: S608 - `wanted`'s constant SQL
                "ELSE a.filename || ? || a.extracted_text END "
                f"FROM {labels.table} {labels.join} search_labels l ON l.id = wanted.value "
                "JOIN conversations c ON c.id = l.conversation_id LEFT JOIN attachments a ON a.id = l.attachment_id",
                ("\n", labels.parameter),
            ).fetchall()
        )
    return {rowid: text for rowid, text in found.items() if text is not None}


def quoted(lexeme: str) -> str:
    """A lexeme as tsvector and tsquery literals write it: in single quotes, `'` doubled, `\\` escaped."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def terms(rowid: int, text: str) -> tuple[str, int]:
    """The row's tsvector literal and its text's length in tokens (all of them: BM25's). The tsvector holds
    each token's folded form and positions, as PostgreSQL's limits allow; the lexeme of each pair of
    adjacent tokens (`pheby.search.word_pairs`); and the row's range lexeme (`range_lexeme`)."""
    found = tokens(text)
    positions: dict[str, list[int]] = {}
    size = 0
    for position, token in enumerate(found, start=1):
        lexeme = token.folded
        kept = positions.get(lexeme)
        if kept is None:
            length = len(lexeme.encode())
            if length > LEXEME_MAX_BYTES or size + length > WORDS_MAX_BYTES:
                continue
            size += length
            positions[lexeme] = kept = []
        if len(kept) < POSITIONS_MAX and (not kept or kept[-1] < POSITION_MAX):
            kept.append(min(position, POSITION_MAX))
    words = [f"{quoted(lexeme)}:{','.join(map(str, at))}" for lexeme, at in positions.items()]
    pairs = [quoted(lexeme) for lexeme in pair_lexemes([token.folded for token in found])]
    return " ".join([*words, *pairs, quoted(range_lexeme(rowid))]), len(found)


def index_written(conn: Connection) -> int:
    """The commit step: where the transaction queued rows (its triggers said so), the terms of the first
    batch of queued rows (all that a write queues, but during a backfill), as `index_pending`."""
    return index_pending(conn, batches=1) if conn.heard(QUEUED_NOTICE) else 0


def index_pending(conn: Connection, *, batches: int | None = None) -> int:
    """Write the terms of the queued index rows (PostgreSQL; SQLite's triggers index as they write), all of
    them or the first `batches` of `PENDING_BATCH`: how many.

    One statement writes a batch and takes it off the queue, their ids, terms and lengths bound as three
    arrays: so the totals' statement trigger updates `search_totals` once."""
    if conn.engine != "postgresql":
        return 0
    done = 0
    for _ in itertools.count() if batches is None else range(batches):
        # The queue's next batch with the texts of its messages (most of what is queued), in one statement.
        # Each text is its own lookup by id: as a join, the planner (expecting a larger queue than a write's
        # few rows) would scan the whole of history_log once it holds a few thousand messages.
        queued = conn.execute(
            "SELECT p.id, (SELECT h.text FROM history_log h WHERE h.id = p.id) "
            "FROM (SELECT id FROM search_pending ORDER BY id LIMIT ?) p",
            (PENDING_BATCH,),
        ).fetchall()
        if not queued:
            return done
        rowids = sorted(int(rowid) for rowid, _ in queued)
        texts = {int(rowid): text for rowid, text in queued if text is not None}
        if labels := [rowid for rowid in rowids if not is_message(rowid)]:
            texts.update(document_texts(conn, labels))
        made = [terms(rowid, texts.get(rowid, "")) for rowid in rowids]
        conn.execute(
            "WITH done AS (DELETE FROM search_pending WHERE id = ANY(?::bigint[])) "
            "INSERT INTO search_index (id, terms, length) "
            "SELECT v.id, v.terms::tsvector, v.length "
            "FROM unnest(?::bigint[], ?::text[], ?::integer[]) v (id, terms, length) "
            "ON CONFLICT (id) DO UPDATE SET terms = excluded.terms, length = excluded.length",
            (rowids, rowids, [literal for literal, _ in made], [length for _, length in made]),
        )
        done += len(rowids)
        if len(rowids) < PENDING_BATCH:
            break
    return done

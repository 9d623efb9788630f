"""How the PostgreSQL index finds a query's rows (`pheby.search.postgres_index`), against what the rows hold.

Its two reads, the walk down the key and the GIN index's lookup (a phrase by its word pairs,
`pheby.search.word_pairs`, each row then checked from its positions), must give the same rows, newest
first, as reading every row of the account: for every kind of term, with either read forced and with the
choice left to the costs, whatever another account holds. Which read a search takes follows the walk's
measure and the planner's expectation (from ANALYZE's statistics). Pairs that share a lexeme must not
make a hit. A database indexed before the pairs were is rewritten by its migration and the next `prepare`.
"""

import itertools
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from pheby.db import Connection, Cursor, Database, open_database
from pheby.protocol.frames import HistoryMessage
from pheby.search import documents, postgres_index
from pheby.search.documents import MESSAGE_ROWS, PARTITION_ROWS, quoted
from pheby.search.index import SearchIndex
from pheby.search.postgres_index import PostgresIndex, lookup_tsquery
from pheby.search.query import SearchQuery, Term, parse_query
from pheby.search.tokens import tokens
from pheby.search.word_pairs import ALPHABET, pair_lexeme
from pheby.store.accounts import Accounts
from pheby.store.conversations import Conversations, TranscriptTurn

pytestmark = pytest.mark.anyio
on_postgresql = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)  # `db`'s engine

WORDS = ["alpha", "beta", "gamma", "delta", "rare", "omega", "kappa", "sigma"]
WEIGHTS = [40, 30, 20, 10, 0.3, 5, 5, 5]
PAIRS_VERSION = 25  # the migration that added the pairs' and the ranges' lexemes


async def log(db: Database, account_id: str, name: str, texts: list[str]) -> None:
    conversations = Conversations(db)
    chat = await conversations.create(account_id, name)
    shown = [
        HistoryMessage(message_id=f"m{i + 1}", role="user" if i % 2 == 0 else "assistant", text=text, ts=None)
        for i, text in enumerate(texts)
    ]
    turns = [TranscriptTurn(i + 1, m.role, m.text) for i, m in enumerate(shown)]
    await conversations.log_transcript(chat.id, shown, turns)


def holds(text: str, term: Term) -> bool:
    words = [token.folded for token in tokens(text)]
    size = len(term.words)
    for at in range(len(words) - size + 1):
        *whole, last = words[at : at + size]
        if whole == list(term.words[:-1]) and (
            last.startswith(term.words[-1]) if term.prefix else last == term.words[-1]
        ):
            return True
    return False


def expected(rows: dict[int, str], query: SearchQuery, low: int, high: int, limit: int) -> list[int]:
    """The newest `limit` rows in [low, high) holding every term: read one by one."""
    hits = [rowid for rowid, text in rows.items() if low <= rowid < high and all(holds(text, t) for t in query.terms)]
    return sorted(hits, reverse=True)[:limit]


async def account_rows(db: Database, account_id: str) -> tuple[int, dict[int, str]]:
    def read(conn: Connection) -> tuple[int, dict[int, str]]:
        number = conn.execute("SELECT number FROM search_partitions WHERE account_id = ?", (account_id,)).fetchone()[0]
        first = int(number) * PARTITION_ROWS
        messages = conn.execute(
            "SELECT id, text FROM history_log WHERE id >= ? AND id < ?", (first, first + PARTITION_ROWS)
        ).fetchall()
        names = conn.execute(
            "SELECT l.id, c.name FROM search_labels l JOIN conversations c ON c.id = l.conversation_id "
            "WHERE l.id >= ? AND l.id < ?",
            (first, first + PARTITION_ROWS),
        ).fetchall()
        return first, {int(rowid): text for rowid, text in [*messages, *names]}

    return await db.run(read)


QUERIES = [
    "alpha",
    "rare",
    "sigma kappa",
    '"alpha beta"',
    '"beta alpha gamma"',
    '"rare alpha"',
    '"delta omega" kappa',
    "gam*",
    '"alpha ga*"',
    '"alpha beta ra*"',
    "absent",
    '"omega omega"',
]


@on_postgresql
@pytest.mark.parametrize("read", ["costs", "walk", "index"])
async def test_both_reads_find_the_newest_rows_holding_the_query_as_reading_every_row_does(
    db: Database, monkeypatch: pytest.MonkeyPatch, read: str
) -> None:
    index = PostgresIndex(db)  # first, as the server makes it: each write's transaction then writes its terms
    rng = random.Random(7)
    accounts = Accounts(db)
    alice, bob = (await accounts.create("alice")).id, (await accounts.create("bob")).id
    for number in range(6):
        texts = [" ".join(rng.choices(WORDS, WEIGHTS, k=rng.randint(2, 12))) for _ in range(120)]
        await log(db, alice, f"{rng.choice(WORDS)} chat {number}", texts)
    # Bob's rows hold the same words, the rare one and its phrases most: never alice's hits.
    await log(db, bob, "rare alpha", ["rare alpha " * 3] * 150)
    monkeypatch.setattr(postgres_index, "WALK_FIRST", 16)
    monkeypatch.setattr(postgres_index, "WALK_PER_MATCH", 1)
    if read != "costs":  # every read after the first walk: the walk (no index), or the index (nothing to walk)
        monkeypatch.setattr(postgres_index, "GIN_ROW_COST", 10**9 if read == "walk" else 0)
        monkeypatch.setattr(postgres_index, "GIN_READ_ROWS", 0)
    first, rows = await account_rows(db, alice)
    found_any = 0
    for text, limit in itertools.product(QUERIES, (1, 7, 60, 1000)):
        query = parse_query(text)
        for low, high in ((first, first + PARTITION_ROWS), (first, first + MESSAGE_ROWS), (first, first + 300)):
            got = await db.run(lambda c: index.matching(c, query, low, high, limit))  # noqa: B023
            assert got == expected(rows, query, low, high, limit), (text, limit, high - first)
            found_any += bool(got)
    assert found_any > 50


@on_postgresql
async def test_pairs_that_share_a_lexeme_make_no_hit(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, tuple[str, str]] = {}
    for first, second in itertools.product((f"w{n}" for n in range(400)), repeat=2):
        lexeme = pair_lexeme(first, second)
        if lexeme in seen and seen[lexeme][0] not in (first, second) and seen[lexeme][1] not in (first, second):
            break
        seen[lexeme] = (first, second)
    (a, b), (c, d) = seen[lexeme], (first, second)
    account = (await Accounts(db).create("alice")).id
    # Rows holding "c d" (the lexeme of "a b") and the words a and b, never side by side.
    await log(db, account, "Notes", [f"{c} {d} {b} x {a}"] * 40 + [f"{a} {b}"] + [f"{b} {a} {c} {d}"] * 40)
    monkeypatch.setattr(postgres_index, "GIN_ROW_COST", 0)
    monkeypatch.setattr(postgres_index, "GIN_READ_ROWS", 0)
    monkeypatch.setattr(postgres_index, "WALK_FIRST", 2)
    monkeypatch.setattr(postgres_index, "WALK_PER_MATCH", 0)
    page = await SearchIndex(db).search(account, f'"{a} {b}"')
    assert [(r.message_id, r.snippet) for r in page.results] == [("m41", f"{a} {b}")]


def test_a_phrase_is_looked_up_by_its_pairs_and_a_word_or_prefix_as_itself() -> None:
    # The pairs' lexemes are a stored format: a change of hash is a migration that rewrites every row.
    assert [pair_lexeme(*pair) for pair in (("tram", "28"), ("cafe", "nicola"), ("a", "b"))] == ["\\&!", "'`@", "\\'>"]
    assert all(len(pair_lexeme(w, "x")) == 3 and set(pair_lexeme(w, "x")) <= set(ALPHABET) for w in WORDS)
    pairs = [quoted(pair_lexeme("cafe", "nicola")), quoted(pair_lexeme("nicola", "near"))]
    assert (
        lookup_tsquery(parse_query('"cafe nicola near" tram ca*')) == f"({pairs[0]} & {pairs[1]}) & ('tram') & ('ca':*)"
    )
    assert lookup_tsquery(parse_query("e-mai*")) == "('e' & 'mai':*)"  # a word's parts: a phrase


@on_postgresql
async def test_rows_indexed_before_the_pairs_are_rewritten_by_the_migration_and_the_next_prepare(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = open_database(database_url, tmp_path / "unused")
    await db.open()
    try:  # rows written, then made as they were before the pairs, the migration not yet applied
        SearchIndex(db)
        account = (await Accounts(db).create("alice")).id
        await log(db, account, "Trams", ["take tram 28 to the castle", "the 28 is not a tram"] * 30)
        await db.transaction(
            lambda c: c.execute(
                "UPDATE search_index SET terms = ts_delete(terms, "
                "ARRAY(SELECT lexeme FROM unnest(terms) WHERE lexeme ~ '^[!-/:-@\\[-`{-~]'))"
            )
        )
        await db.transaction(lambda c: c.execute("DELETE FROM schema_migrations WHERE version >= ?", (PAIRS_VERSION,)))
    finally:
        await db.close()
    db = open_database(database_url, tmp_path / "unused")
    await db.open()
    try:
        pending = "SELECT count(*) FROM search_pending"
        assert await db.run(lambda c: c.execute(pending).fetchone()[0]) == 61  # every message, and the name
        # A writer meanwhile takes a batch of the backfill (10 here), not the whole; a search, all the rest.
        monkeypatch.setattr(documents, "PENDING_BATCH", 10)
        monkeypatch.setattr(postgres_index, "PENDING_BATCH", 10)
        search = SearchIndex(db)
        await Conversations(db).create(account, "Buses")  # queues its name, and writes 10 of the queue
        assert await db.run(lambda c: c.execute(pending).fetchone()[0]) == 61 + 1 - 10
        await search.prepare()
        assert await db.run(lambda c: c.execute(pending).fetchone()[0]) == 0
        terms = await db.run(lambda c: [r[0] for r in c.execute("SELECT terms::text FROM search_index")])
        assert len(terms) == 62
        assert sum(quoted(pair_lexeme("tram", "28")) in t for t in terms) == 30  # each "take tram 28 …"
        page = await search.search(account, '"tram 28"')
        assert {r.snippet for r in page.results} == {"take tram 28 to the castle"}
    finally:
        await db.close()


class Recording(Connection):
    """The connection, and each statement run on it."""

    def __init__(self, conn: Connection) -> None:
        self.engine = conn.engine
        self._conn = conn
        self.statements: list[tuple[str, Sequence[Any]]] = []

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Cursor:
        self.statements.append((sql, parameters))
        return self._conn.execute(sql, parameters)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> Cursor:
        return self._conn.executemany(sql, rows)

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction


@on_postgresql
@pytest.mark.parametrize("expected_share", [0.0001, 0.5])
async def test_the_planners_expectation_sends_a_rare_term_to_the_index_at_once_and_a_common_one_walking(
    db: Database, monkeypatch: pytest.MonkeyPatch, expected_share: float
) -> None:
    index = PostgresIndex(db)
    account = (await Accounts(db).create("alice")).id
    await log(db, account, "Notes", [f"filler {i}" for i in range(400)])
    first, _ = await account_rows(db, account)
    monkeypatch.setattr(postgres_index, "WALK_FIRST", 16)
    monkeypatch.setattr(postgres_index, "WALK_PER_MATCH", 1)
    monkeypatch.setattr(postgres_index, "GIN_ROW_COST", 8)
    monkeypatch.setattr(postgres_index, "GIN_READ_ROWS", 200)
    documents = await db.run(lambda c: int(c.execute("SELECT documents FROM search_totals").fetchone()[0]))
    monkeypatch.setattr(postgres_index._Terms, "expected", lambda self, conn: (expected_share, documents))

    def matching(conn: Connection) -> tuple[list[int], list[tuple[str, Sequence[Any]]]]:
        recording = Recording(conn)
        found = index.matching(recording, parse_query("absent"), first, first + MESSAGE_ROWS, 3)
        return found, recording.statements

    found, statements = await db.run(matching)
    assert found == []
    reads = ["walk" if "walked" in sql else "index" for sql, _ in statements if "terms @@" in sql]
    walks = [parameters for sql, parameters in statements if "walked" in sql]
    if expected_share < 0.01:
        # Two walks (16 rows, then 64) measure the term as rare; the planner agrees: the index, no more walking.
        assert reads == ["walk", "walk", "index"]
        assert sum(int(parameters[2]) for parameters in walks) == 80
    else:  # the planner expects every other row of the index to hold it: walking, to the range's end
        assert "index" not in reads
        assert walks[-1][0] == first  # down to the range's first row


@on_postgresql
async def test_the_planner_expects_a_words_share_of_the_rows_from_the_statistics_analyze_keeps(
    db: Database,
) -> None:
    PostgresIndex(db)
    account = (await Accounts(db).create("alice")).id
    await log(db, account, "Notes", [f"alpha {i}" if i % 4 == 0 else f"beta {i}" for i in range(800)])
    await db.run(lambda c: c.execute("ANALYZE search_index"))

    shares = await db.run(
        lambda c: {text: postgres_index._Terms(parse_query(text)).expected(c) for text in ("alpha", "beta", "absent")}
    )
    assert {text: documents for text, (_, documents) in shares.items()} == dict.fromkeys(shares, 801)
    assert 0.2 <= shares["alpha"][0] <= 0.3
    assert 0.7 <= shares["beta"][0] <= 0.8
    assert shares["absent"][0] < 0.01


@on_postgresql
async def test_a_writes_terms_are_made_from_its_own_messages_read_by_id_not_from_a_scan_of_the_log(
    db: Database,
) -> None:
    """The commit step reads the texts of the rows a write queued by their ids, however large the log: a
    join the planner may turn into a scan of all of history_log (it did, from a few thousand messages on)
    would cost every indexed write milliseconds, growing with the log."""
    PostgresIndex(db)
    account = (await Accounts(db).create("alice")).id
    await log(db, account, "Old", [f"filler {i}" for i in range(5000)])
    await db.run(lambda c: documents.index_pending(c))
    await db.run(lambda c: c.execute("VACUUM ANALYZE"))
    conversation = (await Conversations(db).list(account))[0]

    def write(conn: Connection) -> tuple[int, int]:
        conn.execute(
            "INSERT INTO history_log (conversation_id, hermes_id, role, text, ts) VALUES (?, ?, ?, ?, ?)",
            (conversation.id, 5001, "user", "a new question", None),
        )
        scans = "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'history_log'"
        before = int(conn.execute(scans).fetchone()[0])
        indexed = documents.index_pending(conn)
        return indexed, int(conn.execute(scans).fetchone()[0]) - before

    assert await db.transaction(write) == (1, 0)
    found = (await SearchIndex(db).search(account, "question")).results
    assert [result.snippet for result in found] == ["a new question"]


@on_postgresql
async def test_a_transaction_that_queues_nothing_for_search_does_not_read_the_queue(db: Database) -> None:
    """The commit step reads the queue only after a write queued rows (the queue's trigger tells the
    client so): every other transaction is a round trip shorter."""
    PostgresIndex(db)
    account = (await Accounts(db).create("alice")).id
    reads: list[int] = []

    def queue_reads(conn: Connection) -> None:  # a commit step after the index's: this transaction's reads
        row = conn.execute(
            "SELECT seq_scan + COALESCE(idx_scan, 0) FROM pg_stat_xact_user_tables WHERE relname = 'search_pending'"
        ).fetchone()
        reads.append(0 if row is None else int(row[0]))

    db.add_commit_step(queue_reads)
    await db.transaction(lambda c: c.execute("UPDATE accounts SET name = ? WHERE id = ?", ("Alicia", account)))
    assert reads == [0]
    await log(db, account, "Notes", ["hello there"])  # the conversation's name, then its messages: queued
    assert [read > 0 for read in reads] == [False, True, True]
    found = (await SearchIndex(db).search(account, "hello")).results
    assert [result.snippet for result in found] == ["hello there"]

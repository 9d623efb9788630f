"""The search index (`pheby.search`) on a real database, through the stores that write what it holds.

The index is kept by triggers in the same transaction as each write: a logged message, a new, renamed or
deleted conversation, an attachment claimed or tombstoned, an account removed. Each test writes through
the store (or, for what no store does yet, the SQL the server's cascade runs) and searches right after,
with no step in between. The query grammar and the snippets are checked as pure functions.

Every test of the index runs on both engines, but those of FTS5's own workings (its bm25(), the statements
sent to SQLite), which are SQLite's; `integrity` checks each engine's index against the text it holds.
"""

import random
import sqlite3
import unicodedata
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import TypeVar

import pytest

from pheby.db import Connection, Database, SqliteDatabase, open_database, raw_sqlite
from pheby.errors import BadRequest
from pheby.protocol.frames import HistoryMessage
from pheby.search import index as search_index
from pheby.search.documents import document_texts, terms
from pheby.search.engine import IndexEngine
from pheby.search.index import PARTITION_ROWS, SearchIndex
from pheby.search.query import SearchQuery, parse_query
from pheby.search.snippets import highlights, snippet
from pheby.search.tokens import token_count, tokens
from pheby.store.accounts import Accounts
from pheby.store.conversations import Conversations, TranscriptTurn

Db = Database

pytestmark = [pytest.mark.anyio, pytest.mark.both_engines]
T = TypeVar("T")


@pytest.fixture
async def db(tmp_path: Path, database_url: str) -> AsyncIterator[Database]:
    database = open_database(database_url, tmp_path / "pheby.sqlite3")
    await database.open()
    yield database
    await database.close()


def sqlite_only(db: Db) -> SqliteDatabase:
    if not isinstance(db, SqliteDatabase):
        pytest.skip("about FTS5's own workings")
    return db


async def log(conversations: Conversations, conversation_id: str, *texts: str, first: int = 1) -> list[str]:
    """Log messages (user, assistant, user, …) as the history read after a turn does; their ids."""
    shown = [
        HistoryMessage(message_id=f"m{first + i}", role="user" if i % 2 == 0 else "assistant", text=text, ts=None)
        for i, text in enumerate(texts)
    ]
    turns = [TranscriptTurn(first + i, m.role, m.text) for i, m in enumerate(shown)]
    await conversations.log_transcript(conversation_id, shown, turns)
    return [m.message_id for m in shown]


async def integrity(db: Db) -> None:
    """SQLite: FTS5's integrity check. PostgreSQL: the index holds a row for each message and label, and
    each row's terms and length are those of its text now."""
    if isinstance(db, SqliteDatabase):
        conn = sqlite3.connect(db.path)
        try:
            conn.execute("INSERT INTO search_index (search_index, rank) VALUES ('integrity-check', 0)")
        finally:
            conn.close()
        return

    def check(conn: Connection) -> None:
        indexed = {r[0]: (r[1], r[2]) for r in conn.execute("SELECT id, terms::text, length FROM search_index")}
        kept = [r[0] for r in conn.execute("SELECT id FROM history_log UNION ALL SELECT id FROM search_labels")]
        assert sorted(indexed) == sorted(kept)
        texts = document_texts(conn, kept)
        for rowid, (vector, length) in indexed.items():
            literal, size = terms(rowid, texts[rowid])
            assert length == size == token_count(texts[rowid])  # what a search counts from the text
            assert vector == conn.execute("SELECT ?::tsvector::text", (literal,)).fetchone()[0]
        totals = conn.execute("SELECT documents, tokens FROM search_totals").fetchone()
        assert (totals[0], totals[1]) == (len(indexed), sum(length for _, length in indexed.values()))

    await db.run(check)


async def partition_rows(db: Db, number: int) -> int:
    low, high = number * PARTITION_ROWS, (number + 1) * PARTITION_ROWS
    table = "search_index_docsize" if isinstance(db, SqliteDatabase) else "search_index"
    query = f"SELECT count(*) FROM {table} WHERE id >= ? AND id < ?"
    return int(await db.run(lambda c: c.execute(query, (low, high)).fetchone()[0]))


async def test_messages_are_found_in_their_account_only_and_names_follow_renames_and_deletes(
    db: Db,
) -> None:
    accounts, conversations, search = Accounts(db), Conversations(db), SearchIndex(db)
    alice, bob = await accounts.create("alice"), await accounts.create("bob")
    trip = await conversations.create(alice.id, "Trip to Lisbon")
    ids = await log(conversations, trip.id, "where should we eat?", "Try the pastelaria near the river.")
    bobs = await conversations.create(bob.id, "Bob's pastelaria")
    await log(conversations, bobs.id, "pastelaria hours?", "They open at eight.")

    page = await search.search(alice.id, "pastelaria")
    assert [(r.conversation_id, r.message_id, r.role, r.kind) for r in page.results] == [
        (trip.id, ids[1], "assistant", "message")
    ]
    hit = page.results[0]
    assert [hit.snippet[s:e] for s, e in hit.highlights] == ["pastelaria"]
    assert hit.conversation_name == "Trip to Lisbon"
    assert {r.conversation_id for r in (await search.search(bob.id, "pastelaria")).results} == {bobs.id}

    await conversations.rename(alice.id, trip.id, "Porto weekend")
    assert (await search.search(alice.id, "lisbon")).results == []
    renamed = (await search.search(alice.id, "porto")).results
    assert [(r.kind, r.conversation_name, r.message_id) for r in renamed] == [("name", "Porto weekend", None)]

    await conversations.delete(alice.id, trip.id)
    assert (await search.search(alice.id, "pastelaria")).results == []
    assert (await search.search(alice.id, "porto")).results == []
    assert len((await search.search(bob.id, "pastelaria")).results) == 2  # the name and the question
    await integrity(db)


async def test_an_accounts_removal_empties_its_partition(db: Db) -> None:
    accounts, conversations, search = Accounts(db), Conversations(db), SearchIndex(db)
    alice, bob = await accounts.create("alice"), await accounts.create("bob")
    for account in (alice, bob):
        conversation = await conversations.create(account.id, "Notes")
        await log(conversations, conversation.id, "remember the quokka", "The quokka is remembered.")
    assert await partition_rows(db, 2) == 3  # bob's: a name and two messages (alice is 1; no owner here)
    # No command removes an account yet: the cascade the database runs when one is deleted.
    await db.run(lambda c: c.execute("DELETE FROM accounts WHERE id = ?", (bob.id,)))
    assert await partition_rows(db, 2) == 0
    assert (await search.search(bob.id, "quokka")).results == []
    assert len((await search.search(alice.id, "quokka")).results) == 2
    await integrity(db)


async def test_attachments_are_found_under_their_name_while_claimed_and_live(db: Db) -> None:
    accounts, conversations, search = Accounts(db), Conversations(db), SearchIndex(db)
    alice = await accounts.create("alice")
    conversation = await conversations.create(alice.id, "Shopping")

    def insert(conn: Connection) -> None:
        conn.execute(
            "INSERT INTO attachments (id, account_id, surface, direction, conversation_id, filename, mime, size, "
            "blob_key, extraction_status, extracted_text, created_at) "
            "VALUES ('f1', ?, 'pheby', 'inbound', ?, 'list.md', 'text/markdown', 9, 'k', 'ready', ?, 0)",
            (alice.id, conversation.id, "milk\neggs\nsaffron threads"),
        )

    await db.run(insert)
    assert (await search.search(alice.id, "saffron")).results == []  # an unclaimed upload is nobody's turn yet
    await db.run(lambda c: c.execute("UPDATE attachments SET claimed_at = 1, message_id = 'm3' WHERE id = 'f1'"))
    [hit] = (await search.search(alice.id, "saffron")).results
    assert (hit.kind, hit.message_id, hit.role) == ("attachment", "m3", "user")
    assert hit.attachment is not None
    assert hit.attachment.filename == "list.md"
    assert [hit.snippet[s:e] for s, e in hit.highlights] == ["saffron"]
    [by_name] = (await search.search(alice.id, "list")).results
    assert by_name.snippet == "list.md"
    assert by_name.highlights == [(0, 4)]
    await db.run(lambda c: c.execute("UPDATE attachments SET deleted_at = 2, extracted_text = NULL WHERE id = 'f1'"))
    assert (await search.search(alice.id, "saffron")).results == []
    await integrity(db)


async def test_pages_rank_by_bm25_within_windows_and_reach_every_match(db: Db) -> None:
    accounts, conversations = Accounts(db), Conversations(db)
    search = SearchIndex(db, window=4)
    alice = await accounts.create("alice")
    conversation = await conversations.create(alice.id, "Birds")
    texts = [f"heron note {i}" + (" heron heron" if i == 3 else "") for i in range(10)]
    await log(conversations, conversation.id, *texts)

    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = await search.search(alice.id, "heron", limit=3, cursor=cursor)
        seen += [r.message_id or "" for r in page.results]
        pages += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    # Windows of the 4 newest matches, the 4 before, then 2; pages of at most 3. In the second window, the
    # message saying heron three times comes first; ties go newest first.
    assert seen == ["m10", "m9", "m8", "m7", "m4", "m6", "m5", "m3", "m2", "m1"]
    assert pages == 5
    with pytest.raises(BadRequest):
        await search.search(alice.id, "heron", cursor="nonsense")
    # A well-formed cursor outside the account's rows (another account's range, or one past a rebuilt
    # index) reads nothing: an empty last page, as the OpenAPI document's cursor pattern promises.
    for outside in (f"{PARTITION_ROWS * 9}.0", "0.0", f"{cursor.split('.')[0] if cursor else 1}.999999"):
        page = await search.search(alice.id, "heron", cursor=outside)
        assert (page.results, page.next_cursor) == ([], None), outside


async def test_phrases_prefixes_and_folding(db: Db) -> None:
    accounts, conversations, search = Accounts(db), Conversations(db), SearchIndex(db)
    alice = await accounts.create("alice")
    conversation = await conversations.create(alice.id, "Words")
    ids = await log(conversations, conversation.id, "The Café opens late", "late opens the cafe", "Caféteria")
    assert [r.message_id for r in (await search.search(alice.id, '"cafe opens"')).results] == [ids[0]]
    assert {r.message_id for r in (await search.search(alice.id, "CAFÉ")).results} == {ids[0], ids[1]}
    assert {r.message_id for r in (await search.search(alice.id, "caf*")).results} == set(ids)
    [hit] = (await search.search(alice.id, "cafet*")).results
    assert [hit.snippet[s:e] for s, e in hit.highlights] == ["Caféteria"]


async def traced(db: SqliteDatabase, action: Awaitable[T]) -> tuple[T, list[str]]:
    """What `action` returns, and the SQL statements it ran on the database's connection (values bound)."""
    statements: list[str] = []
    await db.run(lambda conn: raw_sqlite(conn).set_trace_callback(statements.append))
    try:
        return await action, statements
    finally:
        await db.run(lambda conn: raw_sqlite(conn).set_trace_callback(None))


async def test_one_term_is_ranked_in_bm25s_order_without_bm25s_count_over_every_account(db: Db) -> None:
    accounts, conversations, search = Accounts(db), Conversations(db), SearchIndex(db)
    alice, bob = await accounts.create("alice"), await accounts.create("bob")
    bobs = await conversations.create(bob.id, "Bob's")
    await log(conversations, bobs.id, *[f"sea otter sea otters note {i}" for i in range(30)])
    chat = await conversations.create(alice.id, "Otters")
    texts = [
        "a sea otter",
        "the sea otter and the sea otter again, a sea otter thrice",
        "sea otter " + "with many other words around it " * 6,
        "otters and a sea otter",
        "seaweed only",
        "sea, otter: punctuation between",
        "Sea Otter in capitals and a sea otter",
        "no match here at all",
    ]
    await log(conversations, chat.id, *texts)
    sqlite = sqlite_only(db)
    first = PARTITION_ROWS * 1  # alice's partition: the first account created
    for query in ('"sea otter"', "otter", "ott*", "otter*", "sea*"):
        page, statements = await traced(sqlite, search.search(alice.id, query, limit=50))
        assert not [s for s in statements if "bm25(" in s], query  # no count over every account's rows
        conn = sqlite3.connect(sqlite.path)
        try:
            expected = [
                f"m{rowid - first}"
                for (rowid,) in conn.execute(
                    "SELECT rowid FROM search_index WHERE search_index MATCH ? AND rowid >= ? AND rowid < ? "
                    "ORDER BY bm25(search_index), rowid DESC",
                    (parse_query(query).match_expression(), first, first + PARTITION_ROWS // 2),
                )
            ]
        finally:
            conn.close()
        assert [r.message_id for r in page.results if r.kind == "message"] == expected, query
        assert len(expected) >= 3


async def test_several_terms_are_weighed_by_their_idf_in_the_account_not_in_every_account(db: Db) -> None:
    accounts, conversations, search = Accounts(db), Conversations(db), SearchIndex(db)
    alice, bob = await accounts.create("alice"), await accounts.create("bob")
    chat = await conversations.create(alice.id, "Notes")
    # In alice's messages "alpha" is rare and "beta" common; in bob's, many more, the other way round.
    ids = await log(
        conversations, chat.id, "alpha alpha beta", "alpha beta beta", *[f"beta filler {i}" for i in range(30)]
    )
    bobs = await conversations.create(bob.id, "Bob's")
    await log(conversations, bobs.id, *[f"alpha filler {i}" for i in range(200)])
    page = await search.search(alice.id, "beta alpha")
    # The rare word weighs more: two alphas beat two betas (bm25() over the whole table, where bob's
    # rows make alpha the common word, would put them the other way round).
    assert [r.message_id for r in page.results] == [ids[0], ids[1]]
    if isinstance(db, SqliteDatabase):
        _, statements = await traced(db, search.search(alice.id, "beta alpha"))
        assert not [s for s in statements if "bm25(" in s]
    phrase_and_word = await search.search(alice.id, '"alpha beta" beta')
    assert [r.message_id for r in phrase_and_word.results] == [ids[1], ids[0]]  # the second has more betas


async def test_a_terms_idf_is_estimated_from_the_accounts_newest_messages_only(
    db: Db, monkeypatch: pytest.MonkeyPatch
) -> None:
    accounts, conversations, search = Accounts(db), Conversations(db), SearchIndex(db)
    alice = await accounts.create("alice")
    chat = await conversations.create(alice.id, "Notes")
    # "alpha" is common in the older messages and rare in the newest 20; "beta" is in every other one.
    texts = [f"alpha {i}" if i % 2 else f"alpha beta {i}" for i in range(40)]
    texts += [f"alpha beta {i}" if i in (3, 11) else f"beta {i}" if i % 2 else f"gamma {i}" for i in range(20)]
    ids = await log(conversations, chat.id, *texts)
    monkeypatch.setattr(search_index, "IDF_ROWS", 20)
    reads: list[tuple[int, int, int]] = []
    engine = type(search._engine)
    matching = engine.matching

    def recorded(self: IndexEngine, conn: Connection, query: SearchQuery, low: int, high: int, limit: int) -> list[int]:
        reads.append((low, high, limit))
        return matching(self, conn, query, low, high, limit)

    monkeypatch.setattr(engine, "matching", recorded)
    page = await search.search(alice.id, "alpha beta", limit=50)
    estimates = [(low, high) for low, high, limit in reads if limit == search_index.IDF_SAMPLE]
    assert len(estimates) == 2  # both terms'…
    assert {high - low for low, high in estimates} == {20}  # …from the same newest 20 rows
    assert len({high for _, high in estimates}) == 1
    hits = {ids[i] for i, text in enumerate(texts) if "alpha beta" in text}
    assert {r.message_id for r in page.results} == hits


async def test_a_prefix_longer_than_the_index_keeps_is_looked_up_by_the_kept_one_then_checked(
    db: Db,
) -> None:
    accounts, conversations = Accounts(db), Conversations(db)
    search = SearchIndex(db, window=2)
    alice = await accounts.create("alice")
    chat = await conversations.create(alice.id, "Cafés")
    ids = await log(conversations, chat.id, "the cafeteria opens", "Cafétérias close", *["cafes and cafés"] * 5)
    # The newest windows hold only "cafe…" words that are not "cafete…": the page reads on to older windows.
    page = await search.search(alice.id, "cafete*")
    assert {r.message_id for r in page.results} == set(ids[:2])
    assert [page.results[0].snippet[s:e] for s, e in page.results[0].highlights] in (["cafeteria"], ["Cafétérias"])
    if isinstance(db, SqliteDatabase):
        _, statements = await traced(db, search.search(alice.id, "cafete*"))
        assert any("MATCH '\"cafe\"*'" in s for s in statements)  # the index's 4-letter prefix list
    assert page.next_cursor is not None  # its window was full: older rows may match
    rest = await search.search(alice.id, "cafete*", cursor=page.next_cursor)
    assert (rest.results, rest.next_cursor) == ([], None)
    both = await search.search(alice.id, "cafete* opens")  # with another term: bm25() ranks, the check still holds
    assert [r.message_id for r in both.results] == [ids[0]]
    assert (await search.search(alice.id, "cafetx*")).results == []


@pytest.mark.parametrize(
    "query", ['"unclosed', "AND OR NOT", "*", "x" * 10_000, "cats\x00dogs", "", "   ", "a*", "ca*ts", '""', "!!"]
)
def test_queries_outside_the_grammar_are_bad_requests(query: str) -> None:
    with pytest.raises(BadRequest):
        parse_query(query)


def test_the_match_expression_quotes_every_term() -> None:
    expression = parse_query('cats NEAR(dogs) "exact phrase" pre* e-mail OR {x} : -y ^z').match_expression()
    assert expression == '"cats" "near dogs" "exact phrase" "pre"* "e mail" "x" "y" "z"'


def test_snippets_cut_long_text_around_the_first_highlight() -> None:
    text = "lorem ipsum " * 30 + "the narwhal surfaced\nthen dove" + " dolor sit" * 30
    query = parse_query("narwhal")
    excerpt, ranges = snippet(text, highlights(text, query))
    assert excerpt.startswith("…")
    assert excerpt.endswith("…")
    assert len(excerpt) <= 170
    assert [excerpt[s:e] for s, e in ranges] == ["narwhal"]
    assert "\n" not in excerpt


def reference_tokens(text: str) -> list[tuple[int, int, str]]:
    """The tokenizer's rule one character at a time: runs of L*, N*, Co and Mn, folded (lower case, NFD,
    combining marks dropped)."""

    def fold(word: str) -> str:
        return "".join(c for c in unicodedata.normalize("NFD", word.lower()) if not unicodedata.combining(c))

    found: list[tuple[int, int, str]] = []
    start: int | None = None
    for i, char in enumerate([*text, " "]):
        category = unicodedata.category(char)
        if category[0] in "LN" or category in ("Co", "Mn"):
            start = i if start is None else start
        elif start is not None:
            found.append((start, i, fold(text[start:i])))
            start = None
    return found


def test_tokens_follow_the_rule_character_by_character_on_mixed_scripts() -> None:
    rng = random.Random(23)
    alphabet = [*"abc XYZ é ü ñ ß İ Å 日本 ١٢ _-.,!?", "\u0301", "\u0308", "\u0903", "\ue000", "\U000f0001"]
    alphabet += [*"😀 ǅ Ⅻ ² ﬁ ㉈ 가 ﷺ", "\uff21", "\uff22"]  # and fullwidth A, B
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert [tuple(t) for t in tokens(text)] == reference_tokens(text), text
        assert token_count(text) == len(reference_tokens(text)), text  # a row's length, as the index counted it

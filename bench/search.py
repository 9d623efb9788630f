"""Benchmark search: latency over a large account, the cost the index adds to each kept turn, its size.

Run: `.venv/bin/python bench/search.py [--conversations 10000] [--messages 100] [--queries 400] [--turns 200]
[--engine sqlite|postgresql] [--database-url URL]`: on PostgreSQL, in a new database made on the server of
`--database-url` (a user that may create databases), or on a throwaway server (`tests/postgres_server.py`)
with the `shared_buffers` RDS gives the database of `template.yaml` (512 MB, a quarter of a db.t4g.small's
memory), where the search is then measured again after a restart with PostgreSQL's own default (128 MB).

A new data dir (migrated as the server does) gets two accounts: a large one with `--conversations`
conversations of `--messages` messages each (user and assistant in turn, generated from a seeded
vocabulary of 400 pseudo-words with Zipf-like frequencies, 3-20 words a question, 10-50 an answer), and a
small one created after it, whose partition is the top of the index: so every message of the large
account is written on the index's slower path (the row moved into its account's range by the trigger).
Messages are written with the SQL the store writes (`INSERT … INTO history_log`, in large transactions);
the triggers index them as they do in the server.

Printed, from one run:
- search latency through `SearchIndex.search` (the server's code path: the MATCH over the account's rows,
  BM25 over the newest window, the results' rows and snippets), over `--queries` queries of five kinds
  (a word, two words, a phrase taken from a message, a prefix of 3-5 letters, a phrase and a word), words
  drawn uniformly from the vocabulary (so the most common words come up too): p50 and p99 of each kind
  and of all (target: p99 ≤ 50 ms);
- the time the index adds to each kept turn: the median of `Conversations.log_transcript` for a new turn
  (a question and its answer) in the loaded database, with the index's triggers and then with them
  dropped, and the difference (target ≤ 1 ms);
- the index's size (its FTS5 tables, search_labels and search_partitions, from SQLite's dbstat; on
  PostgreSQL its tables and their indexes) as a multiple of the text it indexes (the UTF-8 bytes of the
  messages and names; target ≤ 1.5x).
"""

import argparse
import asyncio
import contextlib
import functools
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from pheby.db import Connection, Database, SqliteDatabase, open_database
from pheby.db.in_lists import in_chunks
from pheby.protocol.frames import HistoryMessage
from pheby.search.documents import index_pending
from pheby.search.index import SearchIndex
from pheby.store.accounts import Accounts
from pheby.store.conversations import Conversations, TranscriptTurn

if TYPE_CHECKING:
    from tests.postgres_server import PostgresServer

VOCABULARY_SIZE: Final = 400
SEED: Final = 24
TARGET_P99_MS: Final = 50.0
TARGET_TURN_MS: Final = 1.0
TARGET_SIZE: Final = 1.5
POSTGRES_SHARED_BUFFERS: Final = "512MB"  # RDS's for template.yaml's db.t4g.small: a quarter of its 2 GiB…
POSTGRES_DEFAULT_BUFFERS: Final = "128MB"  # …and PostgreSQL's own default
_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "sa",
    "to",
    "vi",
    "ze",
    "po",
    "da",
    "fe",
    "gu",
    "hi",
    "jo",
    "bo",
    "ce",
    "xa",
    "qui",
    "ly",
    "mar",
    "ten",
    "os",
    "ul",
    "an",
]


def vocabulary(rng: random.Random) -> list[str]:
    words: set[str] = set()
    while len(words) < VOCABULARY_SIZE:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))))
    ordered = sorted(words)
    rng.shuffle(ordered)  # frequency rank is unrelated to spelling
    return ordered


class Text:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.words = vocabulary(rng)
        self.weights = [1 / (rank + 1) for rank in range(len(self.words))]

    def message(self, role: str) -> str:
        count = self.rng.randint(3, 20) if role == "user" else self.rng.randint(10, 50)
        words = self.rng.choices(self.words, self.weights, k=count)
        return (" ".join(words).capitalize() + ("?" if role == "user" else ".")).replace(" ", ", ", 1)


def fill(path: Path, account_id: str, conversations: int, messages: int, text: Text) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA synchronous=NORMAL")
    started = time.perf_counter()
    for batch in range(0, conversations, 100):
        conn.execute("BEGIN IMMEDIATE")
        for number in range(batch, min(batch + 100, conversations)):
            conversation_id = uuid.UUID(int=text.rng.getrandbits(128)).hex
            name = " ".join(text.rng.choices(text.words, k=text.rng.randint(1, 4))).capitalize()
            conn.execute(
                "INSERT INTO conversations (id, account_id, name, created_at) VALUES (?, ?, ?, ?)",
                (conversation_id, account_id, name, 1_767_225_600 + number),
            )
            conn.executemany(
                "INSERT OR IGNORE INTO history_log (conversation_id, hermes_id, role, text, ts) VALUES (?, ?, ?, ?, ?)",
                [
                    (conversation_id, i + 1, role, text.message(role), None)
                    for i in range(messages)
                    for role in ("user" if i % 2 == 0 else "assistant",)
                ],
            )
        conn.execute("COMMIT")
        if batch and batch % 1000 == 0:
            print(f"  {batch:,} conversations written ({time.perf_counter() - started:.0f} s)", flush=True)
    conn.close()
    print(f"  filled in {time.perf_counter() - started:.0f} s", flush=True)


async def fill_database(db: Database, account_id: str, conversations: int, messages: int, text: Text) -> None:
    """`fill` through the engine's own transactions (PostgreSQL: its terms written before each commit)."""
    started = time.perf_counter()
    for batch in range(0, conversations, 100):

        def write(conn: Connection, batch: int = batch) -> None:
            for number in range(batch, min(batch + 100, conversations)):
                conversation_id = uuid.UUID(int=text.rng.getrandbits(128)).hex
                name = " ".join(text.rng.choices(text.words, k=text.rng.randint(1, 4))).capitalize()
                conn.execute(
                    "INSERT INTO conversations (id, account_id, name, created_at) VALUES (?, ?, ?, ?)",
                    (conversation_id, account_id, name, 1_767_225_600 + number),
                )
                conn.executemany(
                    "INSERT INTO history_log (conversation_id, hermes_id, role, text, ts) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT DO NOTHING",
                    [
                        (conversation_id, i + 1, role, text.message(role), None)
                        for i in range(messages)
                        for role in ("user" if i % 2 == 0 else "assistant",)
                    ],
                )

        await db.transaction(write)
        if batch and batch % 1000 == 0:
            print(f"  {batch:,} conversations written ({time.perf_counter() - started:.0f} s)", flush=True)
    # As the server and autovacuum leave the tables once the fill settles: the rows a transaction's batch
    # left queued for their terms indexed (as a search or a restart would), the queue's dead rows gone and
    # its file truncated, the planner's statistics fresh.
    await db.transaction(index_pending)
    await db.run(lambda c: c.execute("VACUUM ANALYZE" if c.engine == "postgresql" else "ANALYZE"))
    print(f"  filled in {time.perf_counter() - started:.0f} s", flush=True)


def sample_texts(rng: random.Random, count: int, conn: Connection) -> list[str]:
    """`count` messages' texts drawn by `rng`: the same ones for the same fill, on either engine."""
    ids = rng.sample([int(r[0]) for r in conn.execute("SELECT id FROM history_log ORDER BY id")], count)
    texts = {}
    for chunk, marks in in_chunks(ids):
        sql = f"SELECT id, text FROM history_log WHERE id IN ({marks})"
        texts.update({int(rowid): text for rowid, text in conn.execute(sql, chunk)})
    return [texts[rowid] for rowid in ids]


async def queries(text: Text, count: int, db: Database) -> list[tuple[str, str]]:
    rng = text.rng
    samples = await db.run(functools.partial(sample_texts, rng, count))
    made: list[tuple[str, str]] = []
    for index in range(count):
        kind = ("word", "two words", "phrase", "prefix", "phrase, word")[index % 5]
        if kind == "word":
            made.append((kind, rng.choice(text.words)))
        elif kind == "two words":
            made.append((kind, f"{rng.choice(text.words)} {rng.choice(text.words)}"))
        elif kind in ("phrase", "phrase, word"):
            words = samples[index].rstrip(".?").replace(",", "").lower().split()
            at = rng.randrange(max(1, len(words) - 1))
            phrase = '"' + " ".join(words[at : at + 2]) + '"'
            made.append((kind, phrase if kind == "phrase" else f"{phrase} {rng.choice(text.words)}"))
        else:
            word = rng.choice([w for w in text.words if len(w) >= 3])
            made.append((kind, word[: rng.randint(3, min(5, len(word)))] + "*"))
    return made


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def search_latency(db: Database, account_id: str, made: list[tuple[str, str]], setting: str = "") -> None:
    search = SearchIndex(db)
    for _, query in made[:20]:  # warm the page cache
        await search.search(account_id, query)
    times: dict[str, list[float]] = {}
    for kind, query in made:
        started = time.perf_counter()
        await search.search(account_id, query)
        times.setdefault(kind, []).append((time.perf_counter() - started) * 1000)
    every = [t for kind_times in times.values() for t in kind_times]
    if setting:
        print(f"search with {setting}:")
    for kind, kind_times in [*times.items(), ("all", every)]:
        print(
            f"search {kind:>9}: p50 {percentile(kind_times, 0.5):6.2f} ms, p99 {percentile(kind_times, 0.99):6.2f} ms"
        )
    p99 = percentile(every, 0.99)
    print(f"search p99 over {len(every)} queries: {p99:.2f} ms (target ≤ {TARGET_P99_MS:.0f} ms)")


def run_all(statements: list[str], conn: Connection) -> None:
    for sql in statements:
        conn.execute(sql)


async def turn_costs(
    db: Database, conversations: Conversations, conversation_id: str, turns: int, text: Text
) -> tuple[float, float]:
    """Median seconds of `log_transcript` for one new turn with the index's message triggers and without
    them, alternating turn by turn in one conversation (so both see the same, growing, conversation)."""
    shown: list[HistoryMessage] = await conversations.logged_history(conversation_id)
    number = max((m.number for m in shown), default=0)
    if db.engine == "postgresql":  # the row's number is the key: only its indexing is turned off
        drop = ["ALTER TABLE history_log DISABLE TRIGGER search_message_logged"]
        create = ["ALTER TABLE history_log ENABLE TRIGGER search_message_logged"]
    else:
        triggers: list[tuple[str, str]] = await db.run(
            lambda c: c.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'search_message%'"
            ).fetchall()
        )
        drop = [f"DROP TRIGGER {name}" for name, _ in triggers]
        create = [sql for _, sql in triggers]
    times: dict[bool, list[float]] = {True: [], False: []}
    for index in range(2 * turns):
        indexed = index % 2 == 0
        for role in ("user", "assistant"):
            number += 1
            shown.append(HistoryMessage(message_id=f"m{number}", role=role, text=text.message(role), ts=None))
        listed = [TranscriptTurn(m.number, m.role, m.text) for m in shown]
        started = time.perf_counter()
        await conversations.log_transcript(conversation_id, shown, listed)
        times[indexed].append(time.perf_counter() - started)
        statements = drop if indexed else create
        await db.run(functools.partial(run_all, statements))
    return statistics.median(times[True]), statistics.median(times[False])


async def postgres_sizes(db: Database) -> tuple[int, int]:
    def read(conn: Connection) -> tuple[int, int]:
        text = conn.execute("SELECT SUM(octet_length(text)) FROM history_log").fetchone()[0]
        text += conn.execute("SELECT SUM(octet_length(name)) FROM conversations").fetchone()[0]
        index = conn.execute(
            "SELECT SUM(pg_total_relation_size(c.oid)) FROM pg_class c WHERE c.relkind = 'r' AND c.relname IN "
            "('search_index', 'search_labels', 'search_partitions', 'search_totals', 'search_pending')"
        ).fetchone()[0]
        return int(text), int(index)

    return await db.run(read)


@contextlib.contextmanager
def postgres_database(url: str) -> Iterator[tuple[str, "PostgresServer | None"]]:
    """A new database on the server of `url`, or on a throwaway server (also given) if `url` is empty;
    dropped after."""
    from tests.postgres_server import PostgresServer, fresh_database

    server = None if url else PostgresServer(shared_buffers=POSTGRES_SHARED_BUFFERS)
    try:
        with fresh_database(server.url if server is not None else url) as database_url:
            yield database_url, server
    finally:
        if server is not None:
            server.close()


async def main_postgres(args: argparse.Namespace, url: str, server: "PostgresServer | None") -> None:
    text = Text(random.Random(SEED))
    db = open_database(url, Path("unused"))
    await db.open()
    try:
        SearchIndex(db)  # as the server does first: each transaction then writes its rows' terms before it commits
        accounts = Accounts(db)
        large = await accounts.create("large")
        small = await accounts.create("small")
        conversations = Conversations(db)
        small_chat = await conversations.create(small.id, "Small")
        await conversations.log_transcript(
            small_chat.id,
            [HistoryMessage(message_id="m1", role="user", text="hello", ts=None)],
            [TranscriptTurn(1, "user", "hello")],
        )
        total = args.conversations * args.messages
        print(f"{args.conversations:,} conversations x {args.messages} messages = {total:,} messages", flush=True)
        await fill_database(db, large.id, args.conversations, args.messages, text)
        if server is not None:  # the fill written out now, not while the search is measured
            with psycopg.connect(server.url, autocommit=True) as admin:
                admin.execute("CHECKPOINT")
        made = await queries(text, args.queries, db)
        text_bytes, index_bytes = await postgres_sizes(db)
        setting = f"shared_buffers {server.shared_buffers}" if server is not None else "the server's settings"
        await search_latency(db, large.id, made, setting)
        conversation = (await conversations.list(large.id))[-1]
        with_index, without = await turn_costs(db, conversations, conversation.id, args.turns, text)
    finally:
        await db.close()
    if server is not None:  # the same database, searched again with PostgreSQL's default
        server.stop()
        server.shared_buffers = POSTGRES_DEFAULT_BUFFERS
        server.start()
        db = open_database(url, Path("unused"))
        await db.open()
        try:
            await search_latency(db, large.id, made, f"shared_buffers {server.shared_buffers}")
        finally:
            await db.close()
    report(with_index, without, text_bytes, index_bytes)


def report(with_index: float, without: float, text_bytes: int, index_bytes: int) -> None:
    added = (with_index - without) * 1000
    print(
        f"log_transcript of a new turn: {with_index * 1000:.3f} ms with the index, {without * 1000:.3f} ms "
        f"without; the index adds {added:.3f} ms a turn (target ≤ {TARGET_TURN_MS:.0f} ms)"
    )
    print(
        f"index {index_bytes / 2**20:.1f} MiB for {text_bytes / 2**20:.1f} MiB of text: "
        f"{index_bytes / text_bytes:.2f}x (target ≤ {TARGET_SIZE}x)"
    )


def sizes(path: Path) -> tuple[int, int]:
    conn = sqlite3.connect(path)
    try:
        text = conn.execute("SELECT SUM(LENGTH(CAST(text AS BLOB))) FROM history_log").fetchone()[0]
        text += conn.execute("SELECT SUM(LENGTH(CAST(name AS BLOB))) FROM conversations").fetchone()[0]
        index = conn.execute("SELECT SUM(pgsize) FROM dbstat WHERE name LIKE 'search%'").fetchone()[0]
        return int(text), int(index)
    finally:
        conn.close()


async def main(args: argparse.Namespace) -> None:
    text = Text(random.Random(SEED))
    with tempfile.TemporaryDirectory(prefix="pheby-bench-search-") as folder:
        path = Path(folder) / "pheby.sqlite3"
        db = SqliteDatabase(path)
        await db.open()
        accounts = Accounts(db)
        large = await accounts.create("large")
        small = await accounts.create("small")  # created last: its rows are the top of the index
        small_conversations = Conversations(db)
        small_chat = await small_conversations.create(small.id, "Small")
        await small_conversations.log_transcript(
            small_chat.id,
            [HistoryMessage(message_id="m1", role="user", text="hello", ts=None)],
            [TranscriptTurn(1, "user", "hello")],
        )
        await db.close()
        total = args.conversations * args.messages
        print(f"{args.conversations:,} conversations x {args.messages} messages = {total:,} messages", flush=True)
        await asyncio.to_thread(fill, path, large.id, args.conversations, args.messages, text)
        text_bytes, index_bytes = sizes(path)
        db = SqliteDatabase(path)
        await db.open()
        try:
            made = await queries(text, args.queries, db)
            await search_latency(db, large.id, made)
            conversations = Conversations(db)
            conversation = (await conversations.list(large.id))[-1]
            with_index, without = await turn_costs(db, conversations, conversation.id, args.turns, text)
        finally:
            await db.close()
        report(with_index, without, text_bytes, index_bytes)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--engine", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--database-url", default="", help="PostgreSQL: a server to make the database on")
    arguments = parser.parse_args()
    if arguments.engine == "postgresql":
        with postgres_database(arguments.database_url) as (url, server):
            asyncio.run(main_postgres(arguments, url, server))
    else:
        asyncio.run(main(arguments))

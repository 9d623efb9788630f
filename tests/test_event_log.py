"""The accounts' event log (`pheby.events.log`) on both engines: a gap-free, ordered seq per account taken
in the writer's transaction, reads after a position, retention and `Truncated`."""

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pheby.db import Connection, Database, open_database
from pheby.events import Appender, EventLog, LocalBell, Ring, Truncated, append, heads, read_after
from tests.database import add_accounts

pytestmark = [pytest.mark.anyio, pytest.mark.both_engines]


@pytest.fixture
async def second_db(database_url: str, tmp_path: Path, db: Database) -> AsyncIterator[Database]:
    """Another process's connections to the same database (its own pool, or its own SQLite connection)."""
    database = open_database(database_url, tmp_path / "pheby.sqlite3")
    await database.open()
    yield database
    await database.close()


async def test_seq_is_gap_free_and_ordered_under_concurrent_appends_from_two_processes(
    db: Database, second_db: Database
) -> None:
    await add_accounts(db, "a", "b")
    logs = [EventLog(db), EventLog(second_db)]
    rng = random.Random(20_21)
    plan = [(rng.choice(logs), rng.choice("ab"), n) for n in range(60)]

    async def one(event_log: EventLog, account_id: str, n: int) -> tuple[str, int, int]:
        await asyncio.sleep(rng.random() * 0.01)
        return account_id, n, await event_log.append(account_id, "test.n", {"n": n})

    results = await asyncio.gather(*(one(*step) for step in plan))
    for account_id in "ab":
        mine = sorted((seq, n) for a, n, seq in results if a == account_id)
        assert [seq for seq, _ in mine] == list(range(1, len(mine) + 1))  # each seq once, no gap
        events = await logs[1].read_after(account_id, 0)
        assert [(e.seq, e.payload["n"]) for e in events] == mine  # the row under each seq is its append's
        assert all(e.account_id == account_id and e.kind == "test.n" for e in events)
    assert await logs[0].heads(["a", "b", "nobody"]) == {
        "a": sum(1 for _, a, _ in plan if a == "a"),
        "b": sum(1 for _, a, _ in plan if a == "b"),
        "nobody": 0,
    }


async def test_a_rolled_back_transaction_takes_no_seq(db: Database) -> None:
    await add_accounts(db, "a")
    event_log = EventLog(db)
    assert await event_log.append("a", "k", 1) == 1

    def fails(conn: Connection, appender: Appender) -> None:
        appender.append("a", "k", 2)
        appender.append("a", "k", 3)
        raise RuntimeError("the write failed")

    with pytest.raises(RuntimeError):
        await event_log.transaction(fails)
    assert await event_log.append("a", "k", 4) == 2
    assert [(e.seq, e.payload) for e in await event_log.read_after("a", 0)] == [(1, 1), (2, 4)]


async def test_appending_outside_a_transaction_is_refused(db: Database) -> None:
    await add_accounts(db, "a")
    with pytest.raises(RuntimeError, match="transaction"):
        await db.run(lambda conn: append(conn, "a", "k", {}, 1.0))
    assert await db.run(lambda conn: heads(conn, ["a"])) == {"a": 0}


async def test_one_transaction_appends_to_several_accounts_and_rings_each_once_after_commit(db: Database) -> None:
    await add_accounts(db, "a", "b")
    bell = LocalBell()
    await bell.subscribe("a")
    await bell.subscribe("b")
    event_log = EventLog(db, bell)

    def write(conn: Connection, appender: Appender) -> list[int]:
        return [appender.append("a", "k", 1), appender.append("b", "k", 2), appender.append("a", "k", 3)]

    assert await event_log.transaction(write) == [1, 1, 2]
    rings = [await bell.receive(), await bell.receive()]
    assert {(r.account_id, r.seq) for r in rings if isinstance(r, Ring)} == {("a", 2), ("b", 1)}

    def fails(conn: Connection, appender: Appender) -> None:
        appender.append("a", "k", 4)
        raise RuntimeError

    with pytest.raises(RuntimeError):
        await event_log.transaction(fails)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await bell.receive()  # nothing committed, nothing rung


async def test_reads_after_a_position_in_pages_and_accounts_are_isolated(db: Database) -> None:
    await add_accounts(db, "a", "b")
    event_log = EventLog(db)
    for n in range(1, 8):
        await event_log.append("a", "k", {"n": n, "text": "ünï ✓"})
    await event_log.append("b", "other", [1, 2])
    assert [e.seq for e in await event_log.read_after("a", 2, limit=3)] == [3, 4, 5]
    assert [e.seq for e in await event_log.read_after("a", 5)] == [6, 7]
    assert await event_log.read_after("a", 7) == []
    (only_b,) = await event_log.read_after("b", 0)
    assert (only_b.account_id, only_b.seq, only_b.kind, only_b.payload) == ("b", 1, "other", [1, 2])
    assert (await event_log.read_after("a", 0))[0].payload == {"n": 1, "text": "ünï ✓"}


async def test_retention_by_age_and_count_and_a_position_older_than_kept_is_truncated(db: Database) -> None:
    await add_accounts(db, "a", "b", "c")
    now = [1000.0]
    event_log = EventLog(db, clock=lambda: now[0])
    for n in range(1, 11):
        now[0] = 1000.0 + n
        await event_log.append("a", "k", n)  # at 1001 … 1010
    await event_log.append("b", "k", 1)  # at 1010
    await event_log.append("c", "k", 1)  # at 1010
    now[0] = 1012.0

    # By count: a keeps its newest 6 (5 … 10); by age (older than 1003.5 goes): nothing more of a's.
    assert await event_log.prune(max_age_seconds=8.5, max_per_account=6) == 4
    assert [e.seq for e in await event_log.read_after("a", 4)] == [5, 6, 7, 8, 9, 10]
    with pytest.raises(Truncated) as caught:
        await event_log.read_after("a", 3)
    assert (caught.value.oldest, caught.value.head) == (5, 10)
    with pytest.raises(Truncated):
        await event_log.read_after("a", 0)
    with pytest.raises(Truncated):
        await event_log.read_after("a", 11)  # past the head: a position this log never gave

    # By age: everything goes; the head stays, so seqs go on and an up-to-date reader reads nothing.
    now[0] = 2000.0
    assert await event_log.prune(max_age_seconds=60, max_per_account=100) == 8
    assert await event_log.read_after("a", 10) == []
    with pytest.raises(Truncated) as caught:
        await event_log.read_after("a", 9)
    assert (caught.value.oldest, caught.value.head) == (11, 10)
    assert await event_log.append("a", "k", 11) == 11
    assert [e.seq for e in await event_log.read_after("a", 10)] == [11]
    assert await event_log.read_after("b", 1) == []


async def test_deleting_an_account_deletes_its_events_and_head(db: Database) -> None:
    await add_accounts(db, "a", "b")
    event_log = EventLog(db)
    await event_log.append("a", "k", 1)
    await event_log.append("b", "k", 1)
    await db.run(lambda conn: conn.execute("DELETE FROM accounts WHERE id = ?", ("a",)))
    counts = await db.run(
        lambda conn: [
            conn.execute("SELECT COUNT(*) FROM account_events WHERE account_id = 'a'").fetchone()[0],
            conn.execute("SELECT COUNT(*) FROM account_event_heads WHERE account_id = 'a'").fetchone()[0],
        ]
    )
    assert counts == [0, 0]
    assert await event_log.heads(["a", "b"]) == {"a": 0, "b": 1}
    assert await db.run(lambda conn: read_after(conn, "a", 0, 10)) == []
    with pytest.raises(Truncated):
        await event_log.read_after("a", 1)  # a position of a deleted account: a snapshot (of nothing)

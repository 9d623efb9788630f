"""The feed (`pheby.events.feed`) over real PostgreSQL and real Redis: two "processes", each with its own
pool and its own `RedisBell`, deliver every logged event exactly once and in order, with Redis up, down
and back, a ring lost on purpose, and rings for accounts nobody here follows. And one process on SQLite
with `LocalBell`."""

import asyncio
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio

from pheby.db import Database, SqliteDatabase
from pheby.db.postgres import PostgresDatabase
from pheby.events import Bell, Event, EventLog, Feed, LocalBell, RedisBell, Ring
from tests.database import add_accounts
from tests.polling import until
from tests.redis_server import RedisServer, RedisTarget

pytestmark = [pytest.mark.anyio]

DEADLINE = 15.0  # the longest any wait here may take before the test fails


class Collector:
    """What a feed delivered: each account's seqs in delivery order, with when they arrived."""

    def __init__(self) -> None:
        self.seqs: dict[str, list[int]] = defaultdict(list)
        self.arrived: dict[tuple[str, int], float] = {}
        self.truncated: list[str] = []

    async def on_event(self, event: Event) -> None:
        self.seqs[event.account_id].append(event.seq)
        self.arrived[(event.account_id, event.seq)] = time.monotonic()

    async def on_truncated(self, account_id: str) -> None:
        self.truncated.append(account_id)


class Process:
    """One server process's share: its pool, its bell, its log facade, its feed and what it delivered."""

    def __init__(self, db: Database, bell: Bell, **feed_options: Any) -> None:
        self.db = db
        self.bell = bell
        self.log = EventLog(db, bell)
        self.got = Collector()
        self.feed = Feed(self.log, bell, self.got.on_event, self.got.on_truncated, **feed_options)


@asynccontextmanager
async def process(db: Database, bell: Bell, **feed_options: Any) -> AsyncIterator[Process]:
    await db.open()
    try:
        proc = Process(db, bell, **feed_options)
        await proc.feed.start()
        try:
            yield proc
        finally:
            await proc.feed.aclose()
            await bell.aclose()
    finally:
        await db.close()


def delivered_all(procs: list[Process], heads: dict[str, int]) -> Callable[[], bool]:
    return lambda: all(len(p.got.seqs[a]) >= head for p in procs for a, head in heads.items())


def assert_exactly_once_in_order(procs: list[Process], heads: dict[str, int]) -> None:
    for p in procs:
        for account_id, head in heads.items():
            assert p.got.seqs[account_id] == list(range(1, head + 1)), account_id


@asynccontextmanager
async def two_processes(
    postgres_url: str, redis_url: str, prefix: str, **feed_options: Any
) -> AsyncIterator[tuple[Process, Process]]:
    async with AsyncExitStack() as stack:
        procs = []
        for _ in range(2):
            db = PostgresDatabase(postgres_url, pool_size=3)
            bell = RedisBell(redis_url, prefix=prefix, ping_seconds=1.0, backoff_seconds=(0.05, 0.5))
            procs.append(await stack.enter_async_context(process(db, bell, **feed_options)))
        # Connected, and the RESYNC of the first connect read (of nothing): every delivery to come is counted
        # by its true cause.
        await until(
            lambda: all(p.bell.connected and p.feed.resyncs >= 1 for p in procs),
            what="bells connected",
            timeout=DEADLINE,
        )
        yield procs[0], procs[1]


async def test_two_processes_deliver_what_either_appends_to_both_exactly_once_in_order(
    postgres_url: str, redis_url: RedisTarget
) -> None:
    # Position checks are far apart: what arrives, arrives by its ring.
    async with two_processes(postgres_url, redis_url.url, redis_url.prefix, check_seconds=60) as (one, two):
        await add_accounts(one.db, "a", "b", "c")
        for p in (one, two):
            await p.feed.subscribe("a")
            await p.feed.subscribe("b")
        await two.feed.subscribe("c")

        async def appends(p: Process, account_id: str, count: int) -> None:
            for n in range(count):
                await p.log.append(account_id, "test", {"n": n})

        await asyncio.gather(appends(one, "a", 15), appends(two, "a", 15), appends(two, "b", 10), appends(one, "c", 5))
        heads = {"a": 30, "b": 10}
        await until(delivered_all([one, two], heads), what="every event at both", timeout=DEADLINE)
        await until(lambda: len(two.got.seqs["c"]) >= 5, what="c's events", timeout=DEADLINE)
        await asyncio.sleep(0.1)  # anything delivered twice would be by now
        assert_exactly_once_in_order([one, two], heads)
        assert two.got.seqs["c"] == [1, 2, 3, 4, 5]
        assert "c" not in one.got.seqs  # one never subscribed to c
        for p in (one, two):
            assert p.feed.delivered_by["ring"] == sum(len(s) for s in p.got.seqs.values())
            assert p.feed.positions == {"a": 30, "b": 10} | ({"c": 5} if p is two else {})


async def test_redis_stopped_mid_traffic_loses_nothing_and_the_bell_comes_back_by_itself(
    postgres_url: str, own_redis_server: RedisServer
) -> None:
    async with two_processes(postgres_url, own_redis_server.url, "t:", check_seconds=60, poll_seconds=0.3) as (
        one,
        two,
    ):
        await add_accounts(one.db, "a")
        for p in (one, two):
            await p.feed.subscribe("a")
        appended = 0

        async def append_some(count: int) -> None:
            nonlocal appended
            for i in range(count):
                await (one if i % 2 else two).log.append("a", "test", {"n": appended})
                appended += 1
                await asyncio.sleep(0.005)

        traffic = asyncio.create_task(append_some(40))
        await asyncio.sleep(0.05)
        await asyncio.to_thread(own_redis_server.stop)  # mid-traffic
        await traffic
        await append_some(10)  # with Redis surely down
        assert not one.bell.connected
        assert not two.bell.connected
        await until(delivered_all([one, two], {"a": appended}), what="every event by polling", timeout=DEADLINE)
        assert_exactly_once_in_order([one, two], {"a": appended})
        assert one.feed.delivered_by["poll"] > 0
        assert two.feed.delivered_by["poll"] > 0

        # Back: no polling (and no position checks) from now on, so only rings can deliver; a check the polling
        # had already set its time for still runs (within `poll_seconds`), and none after it for a minute.
        for p in (one, two):
            p.feed.poll_seconds = p.feed.check_seconds = 60
        switched = time.monotonic()
        resyncs = [p.feed.resyncs for p in (one, two)]
        await asyncio.to_thread(own_redis_server.start)
        await until(lambda: one.bell.connected and two.bell.connected, what="bells reconnected", timeout=DEADLINE)
        assert all(isinstance(p.bell, RedisBell) and p.bell.reconnects >= 1 for p in (one, two))
        # Each feed re-reads its positions once its bell is back (nothing new to read here); let that read end,
        # so what follows can only come by ring.
        await until(
            lambda: all(p.feed.resyncs > r for p, r in zip((one, two), resyncs, strict=True)),
            what="resync after reconnect",
            timeout=DEADLINE,
        )
        await until(
            lambda: all(p.feed.last_timed_check > switched for p in (one, two)), what="the last poll", timeout=DEADLINE
        )
        rung = [p.feed.delivered_by["ring"] for p in (one, two)]
        for n in range(5):
            started = time.monotonic()
            await (one, two)[n % 2].log.append("a", "test", {"n": appended})
            appended += 1
            await until(delivered_all([one, two], {"a": appended}), timeout=0.5, what="delivery by ring")
            assert time.monotonic() - started < 0.5
        assert [p.feed.delivered_by["ring"] for p in (one, two)] == [r + 5 for r in rung]
        assert_exactly_once_in_order([one, two], {"a": appended})


async def test_a_lost_ring_is_found_by_the_position_check(postgres_url: str, redis_url: RedisTarget) -> None:
    async with two_processes(postgres_url, redis_url.url, redis_url.prefix, check_seconds=0.5) as (one, two):
        await add_accounts(one.db, "a")
        await two.feed.subscribe("a")
        await one.log.append("a", "test", 1)
        await until(lambda: two.got.seqs["a"] == [1], what="a rung event", timeout=DEADLINE)

        silent = EventLog(one.db)  # no bell: this append's ring is never published
        repairs, checked, rung = (
            two.feed.gap_repairs["check"],
            two.feed.delivered_by["check"],
            two.feed.delivered_by["ring"],
        )
        started = time.monotonic()
        await silent.append("a", "test", 2)
        await until(lambda: two.got.seqs["a"] == [1, 2], timeout=3, what="the unrung event")
        assert time.monotonic() - started < 0.5 + 1.0  # within a check interval (and a read)
        assert two.feed.gap_repairs["check"] == repairs + 1
        assert two.feed.delivered_by["check"] == checked + 1
        assert two.feed.delivered_by["ring"] == rung

        await one.log.append("a", "test", 3)  # and rings go on as before
        await until(lambda: two.got.seqs["a"] == [1, 2, 3], what="the next rung event", timeout=DEADLINE)
        assert two.got.seqs["a"] == [1, 2, 3]


async def test_a_ring_that_skips_ahead_reads_the_events_in_between_first(
    postgres_url: str, redis_url: RedisTarget
) -> None:
    async with two_processes(postgres_url, redis_url.url, redis_url.prefix, check_seconds=60) as (one, two):
        await add_accounts(one.db, "a")
        await two.feed.subscribe("a")
        silent = EventLog(one.db)
        for n in range(3):
            await silent.append("a", "test", n)  # 1, 2, 3 unrung
        await one.log.append("a", "test", 3)  # 4 rings
        await until(lambda: len(two.got.seqs["a"]) >= 4, what="all four", timeout=DEADLINE)
        assert two.got.seqs["a"] == [1, 2, 3, 4]
        assert two.feed.gap_repairs["ring"] == 1


async def test_rings_for_accounts_not_subscribed_are_ignored(postgres_url: str, redis_url: RedisTarget) -> None:
    async with two_processes(postgres_url, redis_url.url, redis_url.prefix, check_seconds=60) as (one, two):
        await add_accounts(one.db, "a", "b")
        await two.feed.subscribe("a")
        await one.feed.subscribe("b")
        async with redis.asyncio.Redis.from_url(redis_url.url) as client:
            # A ring for b (subscribed in another process only), and garbage on a's channel.
            await client.publish(f"{redis_url.prefix}events:b", "7 1.0")
            await client.publish(f"{redis_url.prefix}events:a", "not a ring")
        await one.log.append("b", "test", 1)
        await one.log.append("a", "test", 1)
        await until(
            lambda: two.got.seqs["a"] == [1] and one.got.seqs["b"] == [1], what="the real events", timeout=DEADLINE
        )
        await asyncio.sleep(0.1)
        assert set(two.got.seqs) == {"a"}
        assert two.feed.positions == {"a": 1}

        await two.feed.unsubscribe("a")
        await one.log.append("a", "test", 2)
        await one.log.append("b", "test", 2)
        await until(lambda: one.got.seqs["b"] == [1, 2], what="b's second event", timeout=DEADLINE)
        await asyncio.sleep(0.1)
        assert two.got.seqs["a"] == [1]
        assert two.feed.positions == {}


async def test_the_bell_rings_once_subscribe_returns(postgres_url: str, redis_url: RedisTarget) -> None:
    bell = RedisBell(redis_url.url, prefix=redis_url.prefix)
    await bell.start()
    try:
        await until(lambda: bell.connected, what="connected", timeout=DEADLINE)
        await bell.subscribe("x")
        other = RedisBell(redis_url.url, prefix=redis_url.prefix)
        await other.publish("x", 3)
        await other.publish("y", 4)  # not subscribed here
        await other.aclose()
        async with asyncio.timeout(2):
            first = await bell.receive()
            if first is not None and not isinstance(first, Ring):
                first = await bell.receive()  # the RESYNC of the first connect
        assert isinstance(first, Ring)
        assert (first.account_id, first.seq) == ("x", 3)
        assert first.published_at is not None
        assert abs(first.published_at - time.time()) < 5
    finally:
        await bell.aclose()


async def test_one_process_on_sqlite_with_the_local_bell(tmp_path: Path) -> None:
    async with process(SqliteDatabase(tmp_path / "pheby.sqlite3"), LocalBell(), check_seconds=60) as p:
        await add_accounts(p.db, "a", "b")
        assert await p.feed.subscribe("a") == 0
        for n in range(20):
            await p.log.append("a" if n % 4 else "b", "test", n)
        await until(lambda: len(p.got.seqs["a"]) >= 15, what="a's events", timeout=DEADLINE)
        assert p.got.seqs["a"] == list(range(1, 16))
        assert "b" not in p.got.seqs
        assert p.feed.delivered_by["ring"] == 15

        # A client's position: caught up before subscribe returns.
        assert await p.feed.subscribe("b", after=2) == 5
        assert p.got.seqs["b"] == [3, 4, 5]

        # A position older than retained: a snapshot is owed, then events after the head follow.
        await p.feed.unsubscribe("b")
        await p.log.prune(max_age_seconds=3600, max_per_account=2)
        assert await p.feed.subscribe("b", after=1) == 5
        assert p.got.truncated == ["b"]
        await p.log.append("b", "test", 99)
        await until(lambda: p.got.seqs["b"][-1:] == [6], what="b's next event", timeout=DEADLINE)
        assert p.got.seqs["b"] == [3, 4, 5, 6]

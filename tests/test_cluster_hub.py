"""`ClusterHub` (`pheby.cluster`): three "processes" (each its own pool, bell and hub) on one real PostgreSQL
and one real Redis, with real `Connection`s whose socket is a list. Every connection of an account gets
every logged event exactly once and in seq order, whichever process broadcast it; a run's text converges
and never overtakes the event it followed; only the broadcasting process tells its listeners; Redis
stopped mid-traffic loses nothing."""

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest

from pheby.cluster import ClusterHub
from pheby.cluster import hub as cluster_hub
from pheby.cluster.backlog import Backlog
from pheby.cluster.outbox import BellOutbox
from pheby.cluster.presence import Presence
from pheby.db.postgres import PostgresDatabase
from pheby.events import EventLog, Letter, Live, LocalBell, RedisBell, Ring
from pheby.protocol.frames import (
    ConversationRenamed,
    Event,
    MessageComplete,
    MessageDelta,
    MessageStart,
    RunFinished,
)
from pheby.protocol.hub import Connection
from tests.database import add_accounts
from tests.polling import until
from tests.postgres_server import PostgresServer, fresh_database
from tests.redis_server import RedisServer, RedisTarget

pytestmark = [pytest.mark.anyio]

DEADLINE = 15.0


class Socket:
    """What a client received: each frame, decoded; a text rebuilt from append deltas per message."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []
        self.closed: tuple[int, str] | None = None

    async def send_text(self, text: str) -> None:
        self.frames.append(json.loads(text))

    async def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)

    def names(self) -> list[str]:
        return [f["name"] for f in self.frames if f["type"] == "conversation.renamed"]

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [f for f in self.frames if f["type"] == kind]

    def text(self, message_id: str) -> str | None:
        """The message's text as the client has it: the last cumulative delta, or append deltas applied."""
        text: str | None = None
        for f in self.frames:
            if f["type"] != "message.delta" or f.get("message_id") != message_id:
                continue
            text = f["text"] if "text" in f else (text or "")[: f["offset"]] + f["append"]
        return text


class Process:
    def __init__(self, hub: ClusterHub, db: PostgresDatabase) -> None:
        self.hub = hub
        self.db = db
        self.heard: list[tuple[str, Event]] = []
        hub.listen(lambda account_id, event: self.heard.append((account_id, event)))

    def connect(self, account_id: str, *, append: bool = False) -> Socket:
        socket = Socket()
        connection = Connection(account_id, socket.send_text, socket.close, delta_append=append)
        self.hub.add(connection)
        connection.start()
        return socket


@asynccontextmanager
async def processes(
    postgres_url: str, redis: RedisTarget, count: int = 3, *, presence: bool = False, **hub_options: Any
) -> AsyncIterator[list[Process]]:
    async with AsyncExitStack() as stack:
        procs = []
        for _ in range(count):
            db = PostgresDatabase(postgres_url, pool_size=3)
            await db.open()
            stack.push_async_callback(db.close)
            bell = RedisBell(redis.url, prefix=redis.prefix, ping_seconds=1.0, backoff_seconds=(0.05, 0.5))
            stack.push_async_callback(bell.aclose)
            windows = {"delta_window_seconds": 0.02, "append_window_seconds": 0.01}
            present = Presence(redis.url, prefix=redis.prefix) if presence else None
            hub = ClusterHub(log=EventLog(db, bell), presence=present, **(windows | hub_options))
            await hub.start()
            stack.push_async_callback(hub.aclose)
            procs.append(Process(hub, db))
        await until(lambda: all(p.hub.feed.bell.connected for p in procs), what="bells connected", timeout=DEADLINE)
        yield procs


async def joined(procs: list[Process], *account_ids: str) -> None:
    for p in procs:
        for account_id in account_ids:
            await p.hub.joined(account_id)


def renamed(name: str) -> ConversationRenamed:
    return ConversationRenamed(conversation_id="c1", name=name)


async def logged_names(db: PostgresDatabase, account_id: str) -> list[str]:
    rows = await db.run(
        lambda conn: conn.execute(
            "SELECT payload FROM account_events WHERE account_id = ? ORDER BY seq", (account_id,)
        ).fetchall()
    )
    return [json.loads(row[0])["event"]["name"] for row in rows]


async def test_every_connection_gets_every_logged_event_once_in_seq_order_whoever_broadcast_it(
    postgres_url: str, redis_url: RedisTarget
) -> None:
    async with processes(postgres_url, redis_url) as procs:
        await add_accounts(procs[0].db, "a", "b")
        sockets = [p.connect("a") for p in procs] + [procs[1].connect("a")]
        other = procs[2].connect("b")
        await joined(procs, "a", "b")

        async def broadcasts(index: int, p: Process) -> None:
            for n in range(20):
                p.hub.broadcast("a", renamed(f"p{index}-{n}"))
                if n % 5 == 0:
                    p.hub.broadcast("b", renamed(f"b-p{index}-{n}"))
                await asyncio.sleep(0)

        await asyncio.gather(*(broadcasts(i, p) for i, p in enumerate(procs)))
        await until(lambda: all(len(s.names()) >= 60 for s in sockets), what="every event everywhere", timeout=DEADLINE)
        await asyncio.sleep(0.2)  # anything delivered twice would be by now
        in_the_log = await logged_names(procs[0].db, "a")
        assert len(in_the_log) == 60
        for socket in sockets:
            assert socket.names() == in_the_log  # once each, in seq order
        assert len(other.names()) == 12
        assert all(n.startswith("b-") for n in other.names())
        for index, p in enumerate(procs):  # listeners hear what their own process broadcast, once
            heard = [e.name for a, e in p.heard if a == "a" and isinstance(e, ConversationRenamed)]
            assert heard == [f"p{index}-{n}" for n in range(20)]


async def test_a_runs_text_converges_everywhere_and_never_overtakes_what_it_followed(
    postgres_url: str, redis_url: RedisTarget
) -> None:
    async with processes(postgres_url, redis_url) as procs:
        await add_accounts(procs[0].db, "a")
        owner, *others = procs
        sockets = [p.connect("a", append=append) for p in others for append in (False, True)]
        await joined(procs, "a")
        words = [f"word{n} " for n in range(300)]
        owner.hub.broadcast("a", MessageStart(conversation_id="c1", message_id="m1", run_id="r1"))
        text = ""
        for n, word in enumerate(words):
            text += word
            owner.hub.broadcast("a", MessageDelta(conversation_id="c1", message_id="m1", text=text))
            if n % 50 == 0:
                await asyncio.sleep(0.005)
        owner.hub.broadcast("a", MessageComplete(conversation_id="c1", message_id="m1", text=text))
        owner.hub.broadcast("a", RunFinished(conversation_id="c1", run_id="r1", status="completed"))
        await until(lambda: all(s.of_type("run.finished") for s in sockets), what="the run's end", timeout=DEADLINE)
        await asyncio.sleep(0.2)  # a late delta would be here by now
        for socket in sockets:
            kinds = [f["type"] for f in socket.frames]
            assert kinds[0] == "message.start"  # no text before the event it follows
            assert kinds[-2:] == ["message.complete", "run.finished"]  # and none after the end
            assert text.startswith(socket.text("m1") or "no text")
            assert socket.of_type("message.complete")[0]["text"] == text
        assert any(len(s.of_type("message.delta")) > 1 for s in sockets)  # text streamed, not only the end


async def test_settled_returns_once_what_was_broadcast_is_queued_to_the_connections(
    postgres_url: str, redis_url: RedisTarget
) -> None:
    async with processes(postgres_url, redis_url, count=1) as [proc]:
        await add_accounts(proc.db, "a")
        socket = proc.connect("a")
        await joined([proc], "a")
        connection = proc.hub.of_account("a")[0]
        for n in range(5):
            proc.hub.broadcast("a", renamed(f"n{n}"))
        proc.hub.broadcast("a", MessageDelta(conversation_id="c1", message_id="m1", text="after them"))
        assert connection.owed_bytes == 0  # the events are on their way to the log
        await proc.hub.settled("a")
        # All of it is queued (or sent) by now, in the order it was broadcast: a stop queued next comes after it.
        await connection.drain_and_stop()
        assert socket.names() == [f"n{n}" for n in range(5)]
        assert socket.frames[-1]["type"] == "message.delta"


async def test_text_waits_only_behind_its_own_conversations_events(postgres_url: str, redis_url: RedisTarget) -> None:
    async with processes(postgres_url, redis_url, count=1) as [proc]:
        await add_accounts(proc.db, "a")
        socket = proc.connect("a")
        await joined([proc], "a")
        connection = proc.hub.of_account("a")[0]
        proc.hub.broadcast("a", ConversationRenamed(conversation_id="c1", name="being logged"))
        proc.hub.broadcast("a", MessageDelta(conversation_id="c1", message_id="m1", text="waits"))
        assert connection.owed_bytes == 0
        proc.hub.broadcast("a", MessageDelta(conversation_id="c2", message_id="m2", text="goes at once"))
        assert connection.owed_bytes > 0  # queued to the socket before the append under way has ended
        await proc.hub.settled("a")
        await connection.drain_and_stop()
        assert [(f["type"], f.get("conversation_id")) for f in socket.frames] == [
            ("message.delta", "c2"),
            ("conversation.renamed", "c1"),
            ("message.delta", "c1"),
        ]


async def test_text_waiting_behind_an_append_is_bounded_in_bytes(
    postgres_url: str, redis_url: RedisTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster_hub, "WAITING_DELTA_BYTES", 3000)
    # Windows 0: each delta that waited is sent on as it is, none held back by a coalescer.
    async with processes(postgres_url, redis_url, count=1, delta_window_seconds=0, append_window_seconds=0) as [proc]:
        await add_accounts(proc.db, "a")
        socket = proc.connect("a")
        await joined([proc], "a")
        connection = proc.hub.of_account("a")[0]
        proc.hub.broadcast("a", renamed("being logged"))
        for n in range(1, 11):  # 1,000 bytes more each: the first two fit (1,000 + 2,000), the rest wait for no one
            proc.hub.broadcast("a", MessageDelta(conversation_id="c1", message_id="m1", text="x" * (1000 * n)))
        await proc.hub.settled("a")
        await connection.drain_and_stop()
        assert [len(f.get("text", "")) for f in socket.frames] == [0, 1000, 2000]
        proc.hub.broadcast("a", MessageComplete(conversation_id="c1", message_id="m1", text="x" * 10_000))
        await proc.hub.settled("a")  # the end carries the whole text


async def test_an_account_with_no_socket_here_is_still_told_to_listeners(
    postgres_url: str, redis_url: RedisTarget
) -> None:
    async with processes(postgres_url, redis_url, count=2) as [one, two]:
        await add_accounts(one.db, "a")
        socket = two.connect("a")
        await joined([two], "a")
        one.hub.broadcast("a", renamed("to the absent"))
        await one.hub.settled("a")
        # Web Push hears it where it was broadcast.
        assert [(a, e.name) for a, e in one.heard if isinstance(e, ConversationRenamed)] == [("a", "to the absent")]
        await until(lambda: socket.names() == ["to the absent"], what="the other process's client", timeout=DEADLINE)
        assert two.heard == []


async def test_redis_stopped_mid_traffic_loses_no_logged_event(
    postgres_url: str, own_redis_server: RedisServer
) -> None:
    target = RedisTarget(own_redis_server.url, "t:")
    async with processes(postgres_url, target, count=2) as [one, two]:
        for p in (one, two):
            p.hub.feed.poll_seconds = 0.3
        await add_accounts(one.db, "a")
        sockets = [one.connect("a"), two.connect("a")]
        await joined([one, two], "a")

        def broadcast_some(start: int) -> None:
            for n in range(start, start + 10):
                (one if n % 2 else two).hub.broadcast("a", renamed(f"n{n}"))

        broadcast_some(0)
        await until(lambda: all(len(s.names()) == 10 for s in sockets), what="before the stop", timeout=DEADLINE)
        own_redis_server.stop()
        broadcast_some(10)
        await until(lambda: all(len(s.names()) == 20 for s in sockets), what="with Redis down", timeout=DEADLINE)
        own_redis_server.start()
        await until(lambda: one.hub.feed.bell.connected and two.hub.feed.bell.connected, what="back", timeout=DEADLINE)
        broadcast_some(20)
        await until(lambda: all(len(s.names()) == 30 for s in sockets), what="after the start", timeout=DEADLINE)
        await asyncio.sleep(0.2)
        in_the_log = await logged_names(one.db, "a")
        for socket in sockets:
            assert socket.names() == in_the_log


async def test_postgresql_stopped_mid_traffic_delays_the_other_processes_and_loses_nothing(
    own_postgres_server: PostgresServer, redis_url: RedisTarget
) -> None:
    with fresh_database(own_postgres_server.url) as url:
        async with processes(url, redis_url, count=2, append_patience=0.5) as [one, two]:
            for p in (one, two):
                p.hub.feed.poll_seconds = 0.3
            await add_accounts(one.db, "a")
            here, there = one.connect("a"), two.connect("a")
            await joined([one, two], "a")
            one.hub.broadcast("a", renamed("before"))
            await until(lambda: there.names() == ["before"], what="the first event", timeout=DEADLINE)
            own_postgres_server.stop()
            for n in range(5):
                one.hub.broadcast("a", renamed(f"down {n}"))
            # This process's client gets them now; the other process can't read the log.
            await until(lambda: len(here.names()) == 6, what="the events at their origin", timeout=DEADLINE)
            assert one.hub.backlog.waiting == 5
            assert there.names() == ["before"]
            own_postgres_server.start()
            one.hub.broadcast("a", renamed("after"))
            expected = ["before", *[f"down {n}" for n in range(5)], "after"]
            await until(lambda: there.names() == expected, what="the backlog logged", timeout=DEADLINE)
            await until(lambda: here.names() == expected, what="the event after", timeout=DEADLINE)
            await asyncio.sleep(0.3)  # a second delivery of the early ones would be here by now
            assert here.names() == expected
            assert await logged_names(one.db, "a") == expected
            assert [e.name for _, e in one.heard if isinstance(e, ConversationRenamed)] == expected  # told once


async def test_the_bell_outbox_stops_when_cancelled_as_a_publish_ends() -> None:
    """A cancel that comes as a publish ends is not lost (`asyncio.wait_for` on Python 3.11 loses it, and the
    outbox's task then waited for its next delta forever: a shutdown that never ended)."""
    outbox_task: list[asyncio.Task[None]] = []

    class CancellingBell(LocalBell):
        async def publish_many(self, items: Sequence[Ring | Live | Letter]) -> None:
            outbox_task[0].cancel()  # shutdown, as the publish is done

    outbox = BellOutbox(CancellingBell(), "origin")
    outbox.start()
    assert outbox._task is not None
    outbox_task.append(outbox._task)
    outbox.put_delta("a", 0, MessageDelta(conversation_id="c1", message_id="m1", text="hello"))
    done, _ = await asyncio.wait(outbox_task, timeout=2)
    assert done
    assert outbox_task[0].cancelled()


async def test_a_hung_redis_holds_no_broadcast_back(postgres_url: str, own_redis_server: RedisServer) -> None:
    """Redis stopped with SIGSTOP (it takes connections and never answers): this process's clients get every
    event as it is broadcast, the other process's by polling the log."""
    target = RedisTarget(own_redis_server.url, "t:")
    async with processes(postgres_url, target, count=2) as [one, two]:
        two.hub.feed.poll_seconds = 0.3
        await add_accounts(one.db, "a")
        here, there = one.connect("a"), two.connect("a")
        await joined([one, two], "a")
        os.kill(own_redis_server.pid, signal.SIGSTOP)
        try:
            for n in range(20):  # one at a time: each its own append (and, before, its own ring's timeout)
                one.hub.broadcast("a", renamed(f"n{n}"))
                await one.hub.settled("a")
            await until(lambda: len(here.names()) == 20, what="this process's clients", timeout=DEADLINE)
            await until(lambda: len(there.names()) == 20, what="the other's, by polling", timeout=DEADLINE)
        finally:
            os.kill(own_redis_server.pid, signal.SIGCONT)
        assert here.names() == there.names() == [f"n{n}" for n in range(20)]


async def test_the_bell_outbox_stops_when_the_publish_swallows_the_cancel() -> None:
    """redis-py's pipeline may swallow a cancel that comes while it runs (it returns, the task still asked to
    stop): the outbox stops all the same."""
    publishing = asyncio.Event()

    class SwallowingBell(LocalBell):
        async def publish_many(self, items: Sequence[Ring | Live | Letter]) -> None:
            publishing.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(10)

    outbox = BellOutbox(SwallowingBell(), "origin")
    outbox.start()
    outbox.put_delta("a", 0, MessageDelta(conversation_id="c1", message_id="m1", text="hello"))
    await asyncio.wait_for(publishing.wait(), 2)
    closing = asyncio.create_task(outbox.aclose())
    done, _ = await asyncio.wait([closing], timeout=2)
    assert done


async def test_the_backlog_is_bounded_in_bytes(own_postgres_server: PostgresServer) -> None:
    """PostgreSQL stopped: the events that wait for it keep at most `max_bytes` of payloads, the newest."""
    with fresh_database(own_postgres_server.url) as url:
        db = PostgresDatabase(url, pool_size=1)
        await db.open()
        try:
            own_postgres_server.stop()
            backlog = Backlog(EventLog(db), lambda _account, _seq: None, max_bytes=3000, retry_seconds=0.1)
            try:
                for n in range(10):
                    backlog.add("a", "test", {"text": f"{n}" * 1000})
                assert backlog.waiting == 2  # two of ~1 KB each fit in 3,000 bytes, with the third they don't
            finally:
                await backlog.aclose()
                own_postgres_server.start()
        finally:
            await db.close()


async def test_an_account_in_front_of_its_person_on_one_process_is_known_to_the_others(
    postgres_url: str, redis_url: RedisTarget
) -> None:
    """Web Push stays quiet for an account whose connection is in the foreground on any process."""

    async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
        for _ in range(100):  # within a few renewals (2 s each)
            if await check():
                return
            await asyncio.sleep(0.1)
        raise AssertionError(what)

    async with processes(postgres_url, redis_url, count=2, presence=True) as (first, second):
        assert not await second.hub.foreground_elsewhere("acct-present")
        first.connect("acct-present")  # in the foreground from hello on
        await eventually(lambda: second.hub.foreground_elsewhere("acct-present"), "the other process never knew")
        assert not await first.hub.foreground_elsewhere("acct-present")  # its own socket is no "elsewhere"
        for connection in first.hub.of_account("acct-present"):
            connection.foreground = False  # presence.set background: a hidden tab
        await eventually(
            lambda: _not(second.hub.foreground_elsewhere("acct-present")), "still in front after it went away"
        )


async def _not(asked: Awaitable[bool]) -> bool:
    return not await asked

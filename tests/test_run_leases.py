"""Run leases without sockets, on a real database (SQLite, and PostgreSQL): two "processes" (a journal and
its leases each, own holders) over one database. A run is its admitting process's; another takes it over only
once its lease ran out (or its owner on this host is gone), one taker wins, and the ex-owner's writes land
nowhere from then on."""

import asyncio
import gc
import os
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

import hermes_client as hc
from pheby.db import Connection, Database, open_database
from pheby.errors import DatabaseUnavailable
from pheby.process_lease import own_holder
from pheby.runs.active import ActiveRun
from pheby.runs.journal import RunJournal
from pheby.runs.keeper import RunKeeper
from pheby.runs.leases import RunLeases
from pheby.store.accounts import Accounts
from pheby.store.conversations import Conversation, Conversations
from tests.test_run_journal import Clock, approval

pytestmark = [pytest.mark.anyio, pytest.mark.both_engines]

LEASE = 15.0

T = TypeVar("T")


class Process:
    """One server process's view: its journal over its own leases, on a shared wall clock and its own
    monotonic one."""

    def __init__(self, db: Database, clock: Clock, holder: str) -> None:
        self.monotonic = Clock()
        self.leases = RunLeases(db, seconds=LEASE, holder=holder, clock=clock, monotonic=self.monotonic)
        self.journal = RunJournal(db, leases=self.leases)
        self.let_go: list[str] = []
        self.journal.when_taken_over(lambda run: self.let_go.append(run.run_id))

    async def admit(self, run: ActiveRun) -> None:
        assert await self.journal.reserved(run)
        await self.journal.admitted(run)


class World:
    def __init__(self, db: Database, run: ActiveRun, conversation: Conversation) -> None:
        self.db = db
        self.conversation = conversation
        self.clock = Clock()
        self.first = Process(db, self.clock, "host-a:1:aaaa:01")
        self.second = Process(db, self.clock, "host-b:2:bbbb:02")
        self.third = Process(db, self.clock, "host-c:3:cccc:03")
        self.run = run

    async def row(self) -> tuple[str, int, float] | None:
        row = await self.db.run(
            lambda c: c.execute(
                "SELECT owner, epoch, lease_expires_at FROM active_runs WHERE run_id = ?", (self.run.run_id,)
            ).fetchone()
        )
        return None if row is None else (str(row[0]), int(row[1]), float(row[2]))


@pytest.fixture
async def world(tmp_path: Path, database_url: str) -> AsyncIterator[World]:
    db = open_database(database_url, tmp_path / "pheby.sqlite3")
    await db.open()
    owner = await Accounts(db).ensure_owner()
    conversation = await Conversations(db).create(owner.id, "Deploys")
    async with hc.HermesClient("http://127.0.0.1:9", "unused") as client:
        run = ActiveRun(owner, conversation, client)
        run.hermes_run_id = "run_" + run.run_id
        run.phase.move("running")
        yield World(db, run, conversation)
    await db.close()


async def test_a_run_is_its_admitting_processes_until_its_lease_runs_out(world: World) -> None:
    await world.first.admit(world.run)
    assert world.run.epoch == 1
    assert await world.row() == (world.first.leases.holder, 1, world.clock.now + LEASE)
    assert await world.second.leases.left() == []  # live: nobody may take it

    world.clock.now += LEASE - 1
    assert await world.first.leases.renew() == {world.run.run_id: 1}  # renewed: another lease from now
    world.clock.now += LEASE - 1
    assert await world.second.leases.left() == []

    world.clock.now += 2  # the owner went silent past its lease
    [left] = await world.second.leases.left()
    expected = (world.run.run_id, world.first.leases.holder, 1, False)
    assert (left.run_id, left.owner, left.epoch, left.owner_gone) == expected


async def test_of_two_takers_one_wins_and_an_owner_that_renewed_meanwhile_keeps_its_run(world: World) -> None:
    await world.first.admit(world.run)
    world.clock.now += LEASE + 1
    [seen_by_second] = await world.second.leases.left()
    [seen_by_third] = await world.third.leases.left()
    claims = await asyncio.gather(world.second.leases.claim(seen_by_second), world.third.leases.claim(seen_by_third))
    assert sorted(claims, key=str) == [2, None]
    winner = world.second if claims[0] == 2 else world.third
    assert await world.row() == (winner.leases.holder, 2, world.clock.now + LEASE)

    # A lapsed lease its owner renews before anyone claims it stays its owner's.
    await world.db.run(lambda c: c.execute("DELETE FROM active_runs"))
    world.run.epoch = 0
    await world.first.admit(world.run)
    world.clock.now += LEASE + 1
    [left] = await world.second.leases.left()
    assert await world.first.leases.renew() == {world.run.run_id: 1}
    assert await world.second.leases.claim(left) is None
    assert await world.row() == (world.first.leases.holder, 1, world.clock.now + LEASE)


async def test_the_ex_owners_writes_land_nowhere_once_its_run_was_taken_over(world: World) -> None:
    await world.first.admit(world.run)
    world.run.view.streamed.add("before the pause")
    await world.first.journal.save(world.run)
    world.clock.now += LEASE + 1  # paused past its lease
    [left] = await world.second.leases.left()
    assert await world.second.leases.claim(left) == 2

    world.run.view.streamed.add(" and after it")
    world.run.position = 99
    await world.first.journal.save(world.run)
    assert world.first.let_go == [world.run.run_id]  # told once: it lets the run go
    await world.first.journal.decision_asked(world.run, approval(world.run))  # closed: nothing more is written
    assert world.first.let_go == [world.run.run_id]
    [record] = await world.second.journal.load()
    assert (record.streamed, record.position, record.epoch, record.decisions) == ("before the pause", None, 2, [])
    assert await world.row() == (world.second.leases.holder, 2, world.clock.now + LEASE)
    assert world.run.run_id not in await world.first.leases.renew()


async def test_an_ex_owner_ending_a_run_taken_over_leaves_it_to_the_new_owner(world: World) -> None:
    await world.first.admit(world.run)
    world.clock.now += LEASE + 1
    [left] = await world.second.leases.left()
    assert await world.second.leases.claim(left) == 2
    assert await world.first.journal.ended(world.run) is False  # not its end to say
    assert await world.row() == (world.second.leases.holder, 2, world.clock.now + LEASE)


async def test_a_run_whose_owner_on_this_host_is_gone_is_left_at_once(world: World) -> None:
    dead = await asyncio.create_subprocess_exec("true")
    await dead.wait()
    gone = RunLeases(world.db, holder=f"{socket.gethostname()}:{dead.pid}:dddd:04", clock=world.clock)
    alive = RunLeases(world.db, holder=f"{own_holder()}:05", clock=world.clock)  # this very process
    # This process's pid with another random part: an earlier process that had the same pid (pid 1 in a
    # container restarted after kill -9).
    reborn = RunLeases(world.db, holder=f"{socket.gethostname()}:{os.getpid()}:eeee:06", clock=world.clock)
    for leases in (gone, alive, reborn):
        conversation = await Conversations(world.db).create(world.run.account.id, "Another")
        journal = RunJournal(world.db, leases=leases)
        assert await journal.reserved(ActiveRun(world.run.account, conversation, world.run.client))
    left = await world.second.leases.left()
    assert [(entry.owner, entry.owner_gone) for entry in left] == [(gone.holder, True), (reborn.holder, True)]
    assert await world.second.leases.claim(left[0]) == 2


async def test_a_released_run_is_left_at_once_and_the_owner_knows_its_leases_only_so_long(world: World) -> None:
    first = world.first
    assert not first.leases.valid()  # nothing confirmed yet
    await first.admit(world.run)
    assert await first.leases.confirm(world.run.run_id, 1)
    assert first.leases.valid()
    first.monotonic.now += LEASE * 2 / 3  # past what its last renewal vouches for
    assert not first.leases.valid()
    assert await first.leases.confirm(world.run.run_id, 1)
    assert not await first.leases.confirm(world.run.run_id, 2)

    await first.leases.release()  # a graceful stop, after the journal has the run
    [left] = await world.second.leases.left()
    assert left.run_id == world.run.run_id
    assert await world.second.leases.claim(left) == 2
    assert not await first.leases.confirm(world.run.run_id, 1)


async def test_a_conversation_has_one_run_whichever_process_reserves_it(world: World) -> None:
    await world.first.admit(world.run)
    second_try = ActiveRun(world.run.account, world.conversation, world.run.client)
    assert not await world.second.journal.reserved(second_try)  # the first process's run is under way
    assert not await world.first.journal.reserved(second_try)
    world.clock.now += LEASE + 1
    assert not await world.second.journal.reserved(second_try)  # expired is not over: it is taken over
    assert await world.first.journal.ended(world.run)
    assert await world.second.journal.reserved(second_try)
    assert second_try.epoch == 1
    assert await world.row() is None  # world.run's row went; the new one is second_try's
    owners = await world.db.run(lambda c: c.execute("SELECT run_id, owner FROM active_runs").fetchall())
    assert [tuple(row) for row in owners] == [(second_try.run_id, world.second.leases.holder)]


class Engine:
    """The run engine as the keeper sees it: the runs under way here."""

    def __init__(self) -> None:
        self.active: list[ActiveRun] = []
        self.let_gone: list[ActiveRun] = []

    def all_active(self) -> list[ActiveRun]:
        return list(self.active)

    def let_go(self, run: ActiveRun) -> None:
        self.let_gone.append(run)


async def test_the_keeper_lets_go_of_a_run_taken_over_and_gives_up_a_row_with_no_run_behind_it(
    world: World,
) -> None:
    engine = Engine()
    taken: list[str] = []

    async def take_over() -> list[ActiveRun]:
        taken.extend(left.run_id for left in await world.first.leases.left())
        return []

    keeper = RunKeeper(engine, world.first.leases, take_over)
    await world.first.admit(world.run)
    engine.active.append(world.run)
    await keeper.once()
    assert (engine.let_gone, taken) == ([], [])

    world.clock.now += LEASE + 1  # stalled: another process takes the run over
    [left] = await world.second.leases.left()
    assert await world.second.leases.claim(left) == 2
    await keeper.once()
    assert engine.let_gone == [world.run]

    # A row of this process's with no run of its behind it (its end failed to delete it): given up at the
    # second pass that finds it, then anyone's to take over.
    conversation = await Conversations(world.db).create(world.run.account.id, "Old")
    orphan = ActiveRun(world.run.account, conversation, world.run.client)
    assert await world.first.journal.reserved(orphan)
    engine.active.clear()
    await keeper.once()
    assert taken == []
    await keeper.once()
    assert taken == [orphan.run_id]


class Unreachable(Database):
    """A database that answers, once let, that it can't be reached (a pool waiting out its timeout)."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = asyncio.Event()

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def run(self, fn: Callable[[Connection], T]) -> T:
        await self.answer.wait()
        raise DatabaseUnavailable()

    async def transaction(self, fn: Callable[[Connection], T], *, durable: bool = False) -> T:
        return await self.run(fn)

    async def credential_marker(self) -> int:
        raise DatabaseUnavailable()


async def test_a_renewal_failing_after_its_caller_was_cancelled_leaves_no_unretrieved_error() -> None:
    """Its caller cancelled (a shutdown, a timeout), a renewal that then fails is not reported as an error
    nobody retrieved: that report, logged with its traceback whenever the task is collected, is noise at best."""
    db = Unreachable()
    leases = RunLeases(db, holder="host-a:1:aaaa:01")
    reported: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        caller = asyncio.create_task(leases.renew())
        await asyncio.sleep(0)
        caller.cancel()
        await asyncio.gather(caller, return_exceptions=True)
        db.answer.set()
        for _ in range(3):
            await asyncio.sleep(0)
        del leases, caller  # with them the failed renewal's last references, as a stopped server drops its own
        gc.collect()
        assert reported == []
    finally:
        loop.set_exception_handler(None)

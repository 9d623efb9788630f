"""Run leases without sockets, on a real database (SQLite, and PostgreSQL): two "processes" (a journal and
its leases each, own holders) over one database. A run is its admitting process's; another takes it over only
once its lease ran out (or its owner on this host is gone), one taker wins, and the ex-owner's writes land
nowhere from then on."""

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import hermes_client as hc
from pheby.db import Database, open_database
from pheby.runs.active import ActiveRun
from pheby.runs.journal import RunJournal
from pheby.runs.leases import RunLeases
from pheby.store.accounts import Accounts
from pheby.store.conversations import Conversation, Conversations
from tests.test_run_journal import Clock, approval

pytestmark = [pytest.mark.anyio, pytest.mark.both_engines]

LEASE = 15.0


class Process:
    """One server process's view: its journal over its own leases, on a shared wall clock and its own
    monotonic one."""

    def __init__(self, db: Database, clock: Clock, holder: str) -> None:
        self.monotonic = Clock()
        self.leases = RunLeases(db, seconds=LEASE, holder=holder, clock=clock, monotonic=self.monotonic)
        self.journal = RunJournal(db, leases=self.leases)
        self.let_go: list[str] = []
        self.journal.when_taken_over(lambda run: self.let_go.append(run.run_id))


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
    await world.first.journal.admitted(world.run)
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
    await world.first.journal.admitted(world.run)
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
    await world.first.journal.admitted(world.run)
    world.clock.now += LEASE + 1
    [left] = await world.second.leases.left()
    assert await world.first.leases.renew() == {world.run.run_id: 1}
    assert await world.second.leases.claim(left) is None
    assert await world.row() == (world.first.leases.holder, 1, world.clock.now + LEASE)


async def test_the_ex_owners_writes_land_nowhere_once_its_run_was_taken_over(world: World) -> None:
    await world.first.journal.admitted(world.run)
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
    await world.first.journal.admitted(world.run)
    world.clock.now += LEASE + 1
    [left] = await world.second.leases.left()
    assert await world.second.leases.claim(left) == 2
    assert await world.first.journal.ended(world.run) is False  # not its end to say
    assert await world.row() == (world.second.leases.holder, 2, world.clock.now + LEASE)


async def test_a_run_whose_owner_on_this_host_is_gone_is_left_at_once(world: World) -> None:
    dead = await asyncio.create_subprocess_exec("true")
    await dead.wait()
    gone = RunLeases(world.db, holder=f"{socket.gethostname()}:{dead.pid}:dddd:04", clock=world.clock)
    alive = RunLeases(world.db, holder=f"{socket.gethostname()}:{os.getpid()}:eeee:05", clock=world.clock)
    for leases in (gone, alive):
        run = ActiveRun(world.run.account, world.conversation, world.run.client)
        await RunJournal(world.db, leases=leases).admitted(run)
    left = await world.second.leases.left()
    assert [(entry.owner, entry.owner_gone) for entry in left] == [(gone.holder, True)]
    assert await world.second.leases.claim(left[0]) == 2


async def test_a_released_run_is_left_at_once_and_the_owner_knows_its_leases_only_so_long(world: World) -> None:
    first = world.first
    assert not first.leases.valid()  # nothing confirmed yet
    await first.journal.admitted(world.run)
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

"""One `pheby serve` per PostgreSQL database (`pheby.process_lease`): a second is refused at start with one
line; a stopped holder frees it at once, a dead one when its lease expires or, on its own host, at once."""

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pheby.db.postgres import PostgresDatabase
from pheby.process_lease import LEASE_SECONDS, LeaseHeld, ServerLease
from tests.crash_safety import SECRET, ServerProcess, serve_to_the_end
from tests.live_server import free_port
from tests.postgres_server import PostgresServer, fresh_database

pytestmark = pytest.mark.anyio


@pytest.fixture
async def db(postgres_url: str) -> AsyncIterator[PostgresDatabase]:
    database = PostgresDatabase(postgres_url, pool_size=2)
    await database.open()
    yield database
    await database.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_held_lease_refuses_a_second_process_until_released(db: PostgresDatabase) -> None:
    first, second = ServerLease(db, holder="elsewhere:1:a"), ServerLease(db, holder="elsewhere:2:b")
    await first.take()
    with pytest.raises(LeaseHeld, match=r"^another server process \(pid 1 on elsewhere\) serves this database"):
        await second.take()
    assert await second.holder_elsewhere() is not None
    assert await first.holder_elsewhere() is None  # its own lease is no obstacle
    await first.release()
    await second.take()
    assert await first.holder_elsewhere() is not None
    await second.release()  # say, one of two servers of its process stopped: the other's renewal takes it back
    assert await second.renew()
    with pytest.raises(LeaseHeld):
        await first.take()


async def test_an_expired_lease_is_taken_over_and_its_old_holder_can_no_longer_renew(db: PostgresDatabase) -> None:
    clock = Clock()
    old, new = (
        ServerLease(db, clock=clock, holder="elsewhere:1:a"),
        ServerLease(db, clock=clock, holder="elsewhere:2:b"),
    )
    await old.take()
    clock.now += LEASE_SECONDS - 1
    assert await old.renew()
    clock.now += LEASE_SECONDS - 1  # renewed: still held
    with pytest.raises(LeaseHeld):
        await new.take()
    clock.now += 2  # past the renewed expiry: the holder is taken for dead (paused, or gone)
    await new.take()
    assert not await old.renew()  # the paused ex-holder finds it is no longer its own
    await old.release()  # and its release leaves the new holder's lease alone
    assert await old.holder_elsewhere() is not None


async def test_a_holder_of_this_host_whose_process_is_gone_is_replaced_at_once(db: PostgresDatabase) -> None:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    dead = ServerLease(db, holder=f"{os.uname().nodename}:{int(ended.stdout)}:x")
    await dead.take()
    await ServerLease(db).take()


async def test_a_holder_with_this_processes_pid_but_not_its_random_part_is_replaced_at_once(
    db: PostgresDatabase,
) -> None:
    """An earlier process that had this pid (pid 1 of a container restarted after kill -9) is gone."""
    earlier = ServerLease(db, holder=f"{os.uname().nodename}:{os.getpid()}:not-this-one")
    await earlier.take()
    await ServerLease(db).take()


@pytest.mark.live
async def test_a_second_pheby_serve_is_refused_with_one_line_and_a_restart_after_kill_9_is_not(
    postgres_url: str, tmp_path: Path
) -> None:
    env = {"PHEBY_DATABASE_URL": postgres_url}
    first = ServerProcess(tmp_path / "one", free_port(), tmp_path / "one.log", env)
    try:
        await first.wait_up()
        second = serve_to_the_end(tmp_path / "two", {"PHEBY_SECRET": SECRET, "HERMES_URL": "http://127.0.0.1:9", **env})
        assert second.returncode == 2, second.stderr
        # The checks log what passed; the refusal is one line, the last.
        refusals = [line for line in second.stderr.splitlines() if line.startswith("pheby serve:")]
        assert refusals == second.stderr.strip().splitlines()[-1:], second.stderr
        assert refusals[0].startswith(
            f"pheby serve: PHEBY_DATABASE_URL: another server process (pid {first.pid} on {os.uname().nodename})"
        )
        first.kill()
        await first.reap()
        # Its host sees its pid gone: a restart serves at once, without waiting out the lease.
        third = ServerProcess(tmp_path / "three", free_port(), tmp_path / "three.log", env)
        try:
            await third.wait_up(timeout=LEASE_SECONDS - 5)
        finally:
            third.stop()
    finally:
        first.stop()


async def test_giving_the_lease_up_with_the_database_stopped_does_not_fail_the_shutdown(
    own_postgres_server: PostgresServer,
) -> None:
    with fresh_database(own_postgres_server.url) as url:
        database = PostgresDatabase(url, pool_size=1)
        await database.open()
        try:
            lease = ServerLease(database, holder="here:1:a")
            await lease.take()
            own_postgres_server.stop()
            await lease.release()  # logged; the lease lapses by itself
            own_postgres_server.start()
        finally:
            await database.close()

"""The scheduler's single runner on PostgreSQL (`scheduler.running_scheduler`, the `scheduler` lease): of two
servers on one database, exactly one runs the jobs; the other takes over once the first stops, and a
holder that died (its lease never released) is replaced once its lease runs out."""

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from apscheduler.schedulers.base import STATE_PAUSED, STATE_RUNNING
from litestar.testing import AsyncTestClient

import scheduler as scheduler_module
from handlers.support.app import create_app
from pheby.settings import Settings
from tests.database import query
from tests.polling import until

pytestmark = [pytest.mark.anyio]

LEASE = 1.0
RENEW = 0.1


@pytest.fixture(autouse=True)
def short_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduler_module, "LEASE_SECONDS", LEASE)
    monkeypatch.setattr(scheduler_module, "RENEW_SECONDS", RENEW)


def settings_in(make_settings: Callable[..., Settings], postgres: str, data_dir: Path) -> Settings:
    return make_settings(database_url=postgres, data_dir=data_dir)


def runs_jobs(client: AsyncTestClient[Any]) -> bool:
    return bool(client.app.state.scheduler.state == STATE_RUNNING)


async def test_one_of_two_servers_runs_the_jobs_and_the_other_takes_over_when_it_stops(
    migrated_postgres_url: str, make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    first = AsyncTestClient(create_app(settings_in(make_settings, migrated_postgres_url, tmp_path / "one")))
    second = AsyncTestClient(create_app(settings_in(make_settings, migrated_postgres_url, tmp_path / "two")))
    await first.__aenter__()
    first_open = True
    try:
        await until(lambda: runs_jobs(first), what="the first server runs the jobs", timeout=10)
        async with second:
            for _ in range(5):  # a few renewals: the second keeps waiting
                await anyio.sleep(RENEW)
                assert runs_jobs(first)
                assert second.app.state.scheduler.state == STATE_PAUSED
            first_open = False
            await first.__aexit__(None, None, None)  # the first stops: its lease is given up
            await until(lambda: runs_jobs(second), what="the second takes over", timeout=10)
    finally:
        if first_open:
            await first.__aexit__(None, None, None)
    rows = query(settings_in(make_settings, migrated_postgres_url, tmp_path / "one"), "SELECT name FROM process_leases")
    assert ("scheduler",) not in [tuple(r) for r in rows]  # released by the last one too


async def test_a_holder_that_died_is_replaced_once_its_lease_runs_out(
    migrated_postgres_url: str, make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = settings_in(make_settings, migrated_postgres_url, tmp_path / "one")
    async with AsyncTestClient(create_app(settings)) as client:
        services = client.app.state.services
        # The lease row is this server's first: an update racing its first take would find no row to change.
        await until(lambda: runs_jobs(client), what="the server runs the jobs", timeout=10)
        # A server elsewhere holds it and never renews it again (killed).
        await services.db.run(
            lambda c: c.execute(
                "UPDATE process_leases SET holder = ?, expires_at = ? WHERE name = 'scheduler'",
                ("elsewhere:1:dead:0", time.time() + LEASE),
            )
        )
        await until(lambda: not runs_jobs(client), what="the lease lost", timeout=10)
        await until(lambda: runs_jobs(client), what="taken over once it ran out", timeout=10)

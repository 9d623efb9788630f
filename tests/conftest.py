"""Shared fixtures. Fixture plugins for the Hermes doubles and the real gateway live in their own modules."""

import functools
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from handlers.support.app import create_app
from pheby import services as services_module
from pheby.push.endpoints import Resolver, SystemResolver
from pheby.settings import Settings, load_settings
from pheby.store.accounts import Accounts
from scheduler.blob_sweep import sweep_blobs
from tests.app_client import BASE, Api
from tests.passwords import FAST_COST

pytest_plugins: list[str] = [
    "tests.real_hermes",
    "tests.demo_hermes_server",
    "tests.demo_hermes_process",
    "tests.live_server",
    "tests.s3_server",
    "tests.postgres_server",
    "tests.redis_server",
    "tests.browser",
    "tests.tcp_proxy",
    "tests.push_service",
    "tests.database",
]

TEST_SECRET = "test-owner-secret-0123456789abcdef"


# What tests resolve push endpoint hosts to (a test may add a name); every other name is unknown.
TEST_NAMES: dict[str, list[str]] = {"localhost": ["127.0.0.1", "::1"]}


class LoopbackResolver(Resolver):
    """Tests ask no DNS server: a push endpoint's host is one of `TEST_NAMES`, or does not resolve."""

    async def resolve(self, host: str, port: int) -> list[str]:
        addresses = TEST_NAMES.get(host)
        if addresses is None:
            raise OSError(f"{host} is not a name the tests know")
        return list(addresses)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `last_in_group` go to the end, so on their xdist worker they run after the rest of their
    group: a join of work started early (a cron tick to wait for) overlaps the whole group, not one module.
    A test's PostgreSQL run is left out where it would also be an S3 one: the blob store and the database
    don't meet, and S3 is tested on SQLite."""
    left_out = [item for item in items if _postgresql_and_s3(item)]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if not _postgresql_and_s3(item)]
    items.sort(key=lambda item: item.get_closest_marker("last_in_group") is not None)


def _postgresql_and_s3(item: pytest.Item) -> bool:
    params = getattr(getattr(item, "callspec", None), "params", {})
    return bool(params.get("database_url") in ("postgresql", "cluster") and "s3" in params.values())


@pytest.fixture(autouse=True)
def no_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Servers run in the test process resolve push endpoints with `LoopbackResolver`."""
    monkeypatch.setattr(SystemResolver, "resolve", LoopbackResolver.resolve)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked `both_engines` (or in a module so marked) runs once on SQLite and once on PostgreSQL;
    one also marked `in_cluster` runs a third time on PostgreSQL with Redis (`pheby.cluster`'s hub)."""
    if "database_url" in metafunc.fixturenames and metafunc.definition.get_closest_marker("both_engines"):
        engines = ["sqlite", "postgresql"]
        if metafunc.definition.get_closest_marker("in_cluster"):
            engines.append("cluster")
        metafunc.parametrize("database_url", engines, indirect=True)


@pytest.fixture
def database_url(request: pytest.FixtureRequest) -> str:
    """What `make_settings` puts in PHEBY_DATABASE_URL: empty (SQLite in the data dir) unless the test runs on
    PostgreSQL (`both_engines`, or every test with PHEBY_TEST_ENGINE=postgresql), then a new database of its own,
    migrated (a copy of one migrated once)."""
    if _engine(request) in ("postgresql", "cluster"):
        url: str = request.getfixturevalue("migrated_postgres_url")
        return url
    return ""


def _engine(request: pytest.FixtureRequest) -> str:
    """The engine the test's `database_url` runs on: sqlite, postgresql or cluster (PostgreSQL and Redis)."""
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    engine: str = params.get("database_url", os.environ.get("PHEBY_TEST_ENGINE", "sqlite"))
    return engine


@pytest.fixture
def cluster_settings(request: pytest.FixtureRequest, database_url: str) -> dict[str, str]:
    """What `make_settings` adds on the cluster engine: a Redis of the test's (its own key prefix)."""
    if _engine(request) != "cluster":
        return {}
    target = request.getfixturevalue("redis_url")
    return {"redis_url": target.url, "redis_prefix": target.prefix}


@pytest.fixture
def make_settings(tmp_path: Path, database_url: str, cluster_settings: dict[str, str]) -> Callable[..., Settings]:
    """Settings on a temp data dir with a known owner secret (and the test's database); keyword overrides win."""

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {"data_dir": tmp_path / "data", "secret": TEST_SECRET, "database_url": database_url}
        values.update(cluster_settings)
        values.update(overrides)
        return load_settings({}, **values)

    return make


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[Api]:
    """The app in process, on the `settings` fixture of the test's module, lifespan included."""
    async with Api(create_app(settings), base_url=BASE) as client:
        yield client


StartUpSweep = Callable[[], Awaitable[None]]


@pytest.fixture
def start_up_sweep(monkeypatch: pytest.MonkeyPatch) -> StartUpSweep:
    """Await it to wait until the blob sweep that a server started in the test runs at start-up is over.

    A sweep still running races a test's own blobs (it removes a tombstoned attachment's bytes at once),
    and the job's next run time moves on when it starts, not when it ends: so the job is wrapped."""
    over = threading.Event()

    async def sweep_then_tell(services: Any) -> Any:
        try:
            return await sweep_blobs(services)
        finally:
            over.set()

    monkeypatch.setattr("scheduler.sweep_blobs", sweep_then_tell)  # the name the scheduler adds its job by

    async def over_yet() -> None:
        with anyio.fail_after(60):
            while not over.is_set():
                await anyio.sleep(0.02)

    return over_yet


@pytest.fixture(autouse=True)
def cheap_password_hashing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Servers in the test process hash passwords at `FAST_COST`: a sign-in at the real cost (N=2^17) is half a
    second of a core, and most tests sign in only to get a session. Tests of the cost itself, and every
    server in a process of its own (`pheby serve`), hash at the real one: mark a test `real_password_cost`."""
    if request.node.get_closest_marker("real_password_cost") is None:
        monkeypatch.setattr(services_module, "Accounts", functools.partial(Accounts, password_cost=FAST_COST))

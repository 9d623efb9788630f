"""A server with `PHEBY_REDIS_URL` (real PostgreSQL and Redis): its hub is `ClusterHub`, what it broadcasts
is logged, and its scheduler keeps the log within its retention."""

import time
from collections.abc import Callable
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from handlers.support.app import create_app
from pheby import metrics
from pheby.cluster import ClusterHub
from pheby.events import EventLog
from pheby.services import Services
from pheby.settings import Settings, SettingsError, load_settings
from scheduler.event_retention import prune_events
from tests.conftest import TEST_SECRET
from tests.database import query
from tests.live_server import LiveServer
from tests.redis_server import RedisTarget
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio]


def test_redis_needs_postgresql(tmp_path: Any) -> None:
    with pytest.raises(SettingsError, match="PHEBY_REDIS_URL: needs PHEBY_DATABASE_URL"):
        load_settings({"PHEBY_REDIS_URL": "redis://127.0.0.1:6379/0"}, data_dir=tmp_path, secret=TEST_SECRET)
    with pytest.raises(SettingsError, match="PHEBY_REDIS_URL"):
        load_settings(
            {"PHEBY_REDIS_URL": "http://example.com", "PHEBY_DATABASE_URL": "postgresql://h/d"},
            data_dir=tmp_path,
            secret=TEST_SECRET,
        )


async def test_with_redis_the_server_logs_its_broadcasts_and_prunes_the_log(
    make_settings: Callable[..., Any], migrated_postgres_url: str, redis_url: RedisTarget
) -> None:
    settings = make_settings(
        database_url=migrated_postgres_url,
        redis_url=redis_url.url,
        redis_prefix=redis_url.prefix,
        event_retention_seconds=3600,
        event_retention_count=100,
    )
    async with AsyncTestClient(create_app(settings)) as client:
        services: Services = client.app.state.services
        assert isinstance(services.hub, ClusterHub)
        assert services.event_log is not None
        scheduler = client.app.state.scheduler
        assert scheduler.get_job("prune-events").trigger.interval.total_seconds() == 600
        owner = await services.accounts.ensure_owner()
        appender = EventLog(services.db)  # no bell: the server's own is its loop's (the test client runs another)
        for n in range(150):
            await appender.append(owner.id, "test", {"n": n})
        old = time.time() - 7200
        await services.db.transaction(
            lambda conn: conn.execute("UPDATE account_events SET at = ? WHERE seq <= 10", (old,))
        )
        assert await prune_events(services) == 50  # the ten too old, and past the newest 100
        assert await services.event_log.size() == 100
        assert metrics.EVENT_LOG_ROWS._value.get() == 100


@pytest.mark.live
async def test_a_runs_events_are_logged_in_order_and_its_text_is_not(
    migrated_postgres_url: str,  # first: the server stops before its database goes
    redis_url: RedisTarget,
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
) -> None:
    server = start_live_server(
        live_settings(database_url=migrated_postgres_url, redis_url=redis_url.url, redis_prefix=redis_url.prefix)
    )
    async with await PhebyClient.connect(server.ws_url, server.secret) as client:
        created = await client.request("conversation.create", "conversation.created")
        await client.request("chat.send", "run.accepted", conversation_id=created["conversation_id"], text="hi there")
        await client.expect("run.finished")
        await client.request("ping", "pong")
    rows = query(server.settings, "SELECT seq, kind FROM account_events ORDER BY seq")
    kinds = [kind for _, kind in rows]
    assert [seq for seq, _ in rows] == list(range(1, len(rows) + 1))
    assert kinds[0] == "conversation.updated"
    assert "message.delta" not in kinds  # the text streams; it is never logged
    assert kinds.index("message.start") < kinds.index("message.complete") < kinds.index("run.finished")
    assert kinds[-1] == "run.finished"

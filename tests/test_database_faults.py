"""PostgreSQL stopped under a live server: writes answer 503 and nothing unacknowledged is committed,
`/readyz` says the database is down, and service returns by itself once PostgreSQL is back."""

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from pheby.settings import Settings
from tests.live_server import LiveServer
from tests.postgres_server import PostgresServer, fresh_database

pytestmark = [pytest.mark.anyio, pytest.mark.live]

BACK_SECONDS = 20.0


async def create_artifact(http: httpx.AsyncClient, title: str) -> httpx.Response:
    return await http.post("/api/artifacts", json={"title": title, "content": "text"})


async def test_postgresql_stopped_is_503_commits_nothing_and_service_returns_by_itself(
    own_postgres_server: PostgresServer,
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
) -> None:
    with fresh_database(own_postgres_server.url) as url:
        server = start_live_server(live_settings(database_url=url))
        headers = {"Authorization": f"Bearer {server.secret}"}
        async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=30) as http:
            assert (await create_artifact(http, "before")).status_code == 201
            own_postgres_server.stop()
            refused = await create_artifact(http, "while down")
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "unavailable"
            assert str(own_postgres_server.port) not in refused.text
            ready = await http.get("/readyz")
            assert (ready.status_code, ready.json()) == (503, {"status": "unavailable", "down": ["database"]})

            own_postgres_server.start()
            deadline = time.monotonic() + BACK_SECONDS
            answer: Any = None
            while time.monotonic() < deadline:  # no restart of ours: the pool finds PostgreSQL back
                answer = await create_artifact(http, "after")
                if answer.status_code != 503:
                    break
                await asyncio.sleep(0.2)
            assert answer is not None
            assert answer.status_code == 201, answer.text
            assert (await http.get("/readyz")).status_code == 200
            titles = sorted(a["title"] for a in (await http.get("/api/artifacts")).json()["artifacts"])
            assert titles == ["after", "before"]  # the refused write left nothing


async def test_postgresql_killed_loses_no_acknowledged_write(
    own_postgres_server: PostgresServer,
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
) -> None:
    """kill -9 of PostgreSQL (and its backends) right after writes were acknowledged: after its crash recovery,
    every one is there."""
    with fresh_database(own_postgres_server.url) as url:
        server = start_live_server(live_settings(database_url=url))
        headers = {"Authorization": f"Bearer {server.secret}"}
        async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=30) as http:
            titles = [f"kept {n}" for n in range(20)]
            for title in titles:
                assert (await create_artifact(http, title)).status_code == 201
            own_postgres_server.kill()
            own_postgres_server.start()
            deadline = time.monotonic() + BACK_SECONDS
            listed: Any = None
            while time.monotonic() < deadline:
                listed = await http.get("/api/artifacts")
                if listed.status_code == 200:
                    break
                await asyncio.sleep(0.2)
            assert listed is not None
            assert listed.status_code == 200, listed.text
            assert sorted(a["title"] for a in listed.json()["artifacts"]) == sorted(titles)

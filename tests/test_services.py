"""The services container: background work at shutdown; the HTTP clients it makes."""

import asyncio
import ssl
from collections.abc import Callable
from typing import Any

import pytest

from pheby.services import open_services
from pheby.settings import Settings

pytestmark = pytest.mark.anyio


async def test_shutdown_lets_short_work_finish_and_cancels_the_rest(make_settings: Callable[..., Settings]) -> None:
    finished: list[str] = []

    async def work(name: str, seconds: float) -> None:
        await asyncio.sleep(seconds)
        finished.append(name)

    async with open_services(make_settings()) as services:
        services.background(asyncio.create_task(work("filing", 0.2)), finish_at_shutdown=True)
        services.background(asyncio.create_task(work("forever", 3600)))
    assert finished == ["filing"]  # the cron output being filed was not cut off; the endless task was


async def test_the_http_clients_of_every_start_share_one_tls_context(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Making a TLS context loads the CA bundle (some 20 ms of CPU): once a process, not for every client."""
    loads: list[object] = []
    load = ssl.SSLContext.load_verify_locations

    def counted(context: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(context)
        load(context, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    for _ in range(3):
        async with open_services(make_settings(hermes_dashboard_url="http://127.0.0.1:9")):
            pass
    assert len(loads) <= 1  # none where an earlier test of this process made it

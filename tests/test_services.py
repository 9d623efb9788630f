"""The services container: background work at shutdown."""

import asyncio
from collections.abc import Callable

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

"""Shared fixtures. Fixture plugins for the Hermes doubles and the real gateway live in their own modules."""

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from handlers.support.app import create_app
from pheby.settings import Settings, load_settings
from tests.app_client import BASE, Api

pytest_plugins: list[str] = [
    "tests.real_hermes",
    "tests.demo_hermes_server",
    "tests.live_server",
    "tests.s3_server",
    "tests.browser",
    "tests.tcp_proxy",
]

TEST_SECRET = "test-owner-secret-0123456789abcdef"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def make_settings(tmp_path: Path) -> Callable[..., Settings]:
    """Settings on a temp data dir with a known owner secret; keyword overrides win."""

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {"data_dir": tmp_path / "data", "secret": TEST_SECRET}
        values.update(overrides)
        return load_settings({}, **values)

    return make


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[Api]:
    """The app in process, on the `settings` fixture of the test's module, lifespan included."""
    async with Api(create_app(settings), base_url=BASE) as client:
        yield client

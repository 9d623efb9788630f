"""Pytest plugin: the demo Hermes (``demo_hermes.DemoHermesServer``) on loopback, and clients for it.

Registered from ``tests/conftest.py`` (``pytest_plugins = [..., "tests.demo_hermes_server"]``).

Fixtures
  ``demo_hermes``         session-scoped :class:`DemoHermesServer`, shared by every test of the session (each
                          pytest-xdist worker has its own). Do not change its global model or config there;
                          use ``make_demo_hermes`` for that.
  ``make_demo_hermes``    factory for a private :class:`DemoHermesServer` (keyword options of the class),
                          stopped when the test ends.
  ``demo_hermes_client``  a :class:`HermesClient` on ``demo_hermes``, gateway and dashboard (async tests).
  ``demo_hermes_next``    session-scoped :class:`DemoHermesServer` acting as a 0.22-era gateway (every feature of
                          ``demo_hermes.newer.NEWER_FEATURES``: replay, steer, per-run model options).
  ``demo_hermes_next_client``  a :class:`HermesClient` on ``demo_hermes_next``.

Helper: :func:`client_for` builds a ``HermesClient`` for any ``DemoHermesServer`` (or ``DemoHermesProcess``).
"""

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Protocol

import pytest

# The scenarios assert a lot; let pytest explain their failures. Must run before the first import of them.
pytest.register_assert_rewrite("tests.hermes_scenarios")

from demo_hermes import DemoHermesServer  # noqa: E402
from demo_hermes.newer import NEWER_FEATURES  # noqa: E402
from hermes_client import HermesClient  # noqa: E402

__all__ = ["DemoHermes", "client_for"]


class DemoHermes(Protocol):
    """Where a demo Hermes listens and its keys: a ``DemoHermesServer``, or a ``DemoHermesProcess``."""

    @property
    def base_url(self) -> str: ...
    @property
    def dashboard_url(self) -> str: ...
    @property
    def api_key(self) -> str: ...
    @property
    def dashboard_token(self) -> str: ...


def client_for(server: DemoHermes, *, api_key: str | None = None) -> HermesClient:
    """A client for the gateway and dashboard of ``server`` (``api_key`` overrides the right key)."""
    return HermesClient(
        server.base_url,
        server.api_key if api_key is None else api_key,
        dashboard_url=server.dashboard_url,
        dashboard_token=server.dashboard_token,
        connect_timeout=5.0,
        request_timeout=10.0,
    )


@pytest.fixture(scope="session")
def demo_hermes() -> Iterator[DemoHermesServer]:
    with DemoHermesServer() as server:
        yield server


@pytest.fixture
def make_demo_hermes() -> Iterator[Callable[..., DemoHermesServer]]:
    started: list[DemoHermesServer] = []

    def make(**options: Any) -> DemoHermesServer:
        server = DemoHermesServer(**options).start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
async def demo_hermes_client(demo_hermes: DemoHermesServer) -> AsyncIterator[HermesClient]:
    async with client_for(demo_hermes) as client:
        yield client


@pytest.fixture(scope="session")
def demo_hermes_next() -> Iterator[DemoHermesServer]:
    with DemoHermesServer(features=NEWER_FEATURES) as server:
        yield server


@pytest.fixture
async def demo_hermes_next_client(demo_hermes_next: DemoHermesServer) -> AsyncIterator[HermesClient]:
    async with client_for(demo_hermes_next) as client:
        yield client

"""A real uvicorn server running the app on a loopback port, for end-to-end tests.

The server runs in a background thread of the test process (its own event loop), built by the
same `build_uvicorn_config` that `pheby serve` uses, and is stopped at the end of the test.
"""

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn
from litestar import Litestar

from handlers.support.app import create_app
from pheby.runs import ActiveRun
from pheby.server import build_uvicorn_config
from pheby.services import Services
from pheby.settings import Settings
from tests.ws_client import PhebyClient


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class LiveServer:
    settings: Settings
    base_url: str
    ws_url: str
    server: uvicorn.Server
    thread: threading.Thread  # the one it runs in, until its shutdown is done

    @property
    def secret(self) -> str:
        return self.settings.secret

    @property
    def services(self) -> Services:
        """The app's services; they belong to the server's thread and loop, so tests only look."""
        app = self.server.config.app
        assert isinstance(app, Litestar)
        services: Services = app.state.services
        return services


class _Runner:
    def __init__(self, settings: Settings) -> None:
        self.server = uvicorn.Server(build_uvicorn_config(settings, create_app(settings)))
        self.thread = threading.Thread(target=self.server.run, name="uvicorn-test", daemon=True)

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.cancel_leftover_runs()
        self.server.should_exit = True
        self.thread.join(timeout=20)

    def cancel_leftover_runs(self) -> None:
        """Cancel the runs a test left going, as a person would. A stopping server hands its runs over, so on
        a gateway the session shares they would go on, holding its agents (an approval waits 60 s) while the
        next tests run."""
        app = self.server.config.app
        services = app.state.get("services") if isinstance(app, Litestar) and self.server.started else None
        if not isinstance(services, Services) or not self.server.servers or not services.runs.active_count():
            return

        async def cancel_all() -> None:
            async def cancel(run: ActiveRun) -> None:
                with contextlib.suppress(Exception):  # ended meanwhile, or Hermes is gone: nothing to hold
                    await services.runs.cancel(run.account.id, run.conversation_id, run.run_id)

            await asyncio.gather(*(cancel(run) for run in services.runs.all_active()))

        loop = self.server.servers[0].get_loop()
        if loop.is_closed() or not self.thread.is_alive():  # stopped already (by the test itself)
            return
        work = cancel_all()
        try:
            future = asyncio.run_coroutine_threadsafe(work, loop)
        except RuntimeError:  # the loop closed just now
            work.close()
            return
        with contextlib.suppress(Exception):  # bounded: a test's teardown never hangs on it
            future.result(timeout=15)


@pytest.fixture
def start_live_server(database_url: str) -> Iterator[Callable[[Settings], LiveServer]]:
    """Start servers on demand (several per test if needed); all are stopped at the end, before the test's
    database (`database_url`, set up first so it is torn down last) is dropped."""
    runners: list[_Runner] = []

    def start(settings: Settings) -> LiveServer:
        runner = _Runner(settings)
        runner.start()
        runners.append(runner)
        base = f"http://{settings.host}:{settings.port}"
        return LiveServer(settings, base, f"ws://{settings.host}:{settings.port}/ws", runner.server, runner.thread)

    yield start
    for runner in reversed(runners):
        runner.stop()


def hermes_settings(hermes: Any) -> dict[str, Any]:
    """The settings that point a server at a demo Hermes (gateway and dashboard)."""
    return {
        "hermes_url": hermes.base_url,
        "hermes_api_key": hermes.api_key,
        "hermes_dashboard_url": hermes.base_url,
        "hermes_dashboard_token": hermes.dashboard_token,
    }


@pytest.fixture
def live_settings(make_settings: Callable[..., Settings], demo_hermes: Any) -> Callable[..., Settings]:
    """Settings for a live server on a free port against the shared demo Hermes."""

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "port": free_port(),
            **hermes_settings(demo_hermes),
            "media_roots": (demo_hermes.media_dir,),
            "ws_hello_timeout": 1.0,
        }
        values.update(overrides)
        return make_settings(**values)

    return make


@pytest.fixture
def live_server(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings]
) -> LiveServer:
    return start_live_server(live_settings())


def on_gateway(
    start_live_server: Callable[[Settings], LiveServer], make_settings: Callable[..., Settings], gateway: Any
) -> LiveServer:
    """A live server on a real gateway's API server only (no dashboard)."""
    return start_live_server(
        make_settings(port=free_port(), hermes_url=gateway.base_url, hermes_api_key=gateway.api_key)
    )


@pytest.fixture
def real_hermes_server(
    start_live_server: Callable[[Settings], LiveServer], make_settings: Callable[..., Settings], real_hermes: Any
) -> LiveServer:
    """A live server on the session's real 0.19.0 gateway (``real_hermes``)."""
    return on_gateway(start_live_server, make_settings, real_hermes)


@pytest.fixture
def real_hermes_next_server(
    start_live_server: Callable[[Settings], LiveServer], make_settings: Callable[..., Settings], real_hermes_next: Any
) -> LiveServer:
    """A live server on the session's real 0.22-era gateway (``real_hermes_next``)."""
    return on_gateway(start_live_server, make_settings, real_hermes_next)


@pytest.fixture
async def opened() -> AsyncIterator[list[PhebyClient]]:
    """A list for the test's WebSocket clients: each one still open is closed when the test ends."""
    clients: list[PhebyClient] = []
    yield clients
    for client in clients:
        if client.ws.close_code is None:
            await client.close()


async def stopped(server: LiveServer) -> None:
    """Stop a live server gracefully (as SIGTERM does) and wait, bounded, until it has stopped: not only
    its port closed (that comes first) but its shutdown done (its runs handed over, the scheduler's lock
    let go), as a process exits before the next one starts on its data."""
    server.server.should_exit = True
    await asyncio.to_thread(server.thread.join, 20)
    if server.thread.is_alive():
        raise AssertionError("the server did not stop")

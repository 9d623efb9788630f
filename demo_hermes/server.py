"""``DemoHermesServer``: the demo Hermes served by uvicorn on a free loopback port, in a background thread."""

import asyncio
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import anyio.to_thread
import uvicorn

from demo_hermes.app import create_demo_app, new_api_key
from demo_hermes.runs import Run
from demo_hermes.state import DemoOptions, DemoState

__all__ = ["DemoHermesServer"]

START_TIMEOUT: Final = 10.0
STOP_TIMEOUT: Final = 10.0


class DemoHermesServer:
    """Runs ``create_demo_app`` on ``127.0.0.1:<free port>`` (or ``port``); use as a (sync or async) context manager.

    The dashboard endpoints are served on the same port, so ``dashboard_url == base_url``.
    When no ``media_dir`` is given a temporary one is made, and removed again by ``stop()``.
    ``features`` makes it a 0.22-era gateway (``{"run_replay", "run_steer", "model_options"}`` or some of
    them, see ``demo_hermes.newer``); without, it is 0.19.0.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        dashboard_token: str | None = None,
        media_dir: Path | None = None,
        port: int = 0,
        **options: Any,
    ) -> None:
        """``options`` are the fields of ``DemoOptions`` (an unknown name is a ``TypeError``).

        ``port`` 0 (the default) is a free one; another is bound as it is (``OSError`` from ``start()`` if taken).
        """
        self.api_key = api_key or new_api_key()
        self.dashboard_token = dashboard_token or new_api_key()
        self.options = DemoOptions(**options)
        self._owns_media_dir = media_dir is None
        self.media_dir = Path(media_dir) if media_dir is not None else Path(tempfile.mkdtemp(prefix="demo-hermes-"))
        self.app = create_demo_app(
            self.api_key, self.media_dir, dashboard_token=self.dashboard_token, options=self.options
        )
        self._port = port
        self._socket: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._socket is None:
            raise RuntimeError("the demo Hermes is not running")
        return int(self._socket.getsockname()[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def dashboard_url(self) -> str:
        return self.base_url

    @property
    def running(self) -> bool:
        """Whether uvicorn's thread is still serving (it ends at ``stop()``, or should uvicorn fail)."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def state(self) -> DemoState:
        """Everything the demo holds (runs, sessions, config), for tests to look at."""
        state = self.app.state.demo
        assert isinstance(state, DemoState)
        return state

    def release(self) -> None:
        """Let one held stream go on (a ``<hold>`` piece of ``/demo chunks``): the one waiting, or the next."""
        self.state.holds.release()

    def run(self, run_id: str) -> Run | None:
        """A run by id, e.g. to see ``run.requested`` (the model, provider and model_options it was sent)."""
        return self.state.runs.get(run_id)

    def start(self) -> Self:
        if self._thread is not None:
            return self
        # Binding the socket here (port 0) gives a free port with no race, known before uvicorn starts.
        # IPPROTO_TCP must be explicit: asyncio only sets TCP_NODELAY on sockets whose proto says TCP,
        # and without it every response waits ~40 ms on delayed ACKs.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", self._port))
        except OSError:
            sock.close()
            raise
        self._socket = sock
        config = uvicorn.Config(
            self.app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1, access_log=False
        )
        self._server = uvicorn.Server(config)
        server = self._server
        self._thread = threading.Thread(
            target=lambda: asyncio.run(server.serve(sockets=[sock])), name="demo-hermes", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the demo Hermes did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT)
        if self._socket is not None:
            self._socket.close()
        self._server = self._thread = self._socket = None
        if self._owns_media_dir:
            shutil.rmtree(self.media_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await anyio.to_thread.run_sync(self.start)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await anyio.to_thread.run_sync(self.stop)

"""Pytest plugin: the demo Hermes in a process of its own (``python -m demo_hermes``), for tests and benchmarks
that restart the server (SIGKILL, SIGTERM) without restarting the agent.

Registered from ``tests/conftest.py`` (``pytest_plugins = [..., "tests.demo_hermes_process"]``).

Fixture
  ``make_demo_hermes_process``  factory: ``make(*flags, media_dir=None)`` starts a :class:`DemoHermesProcess` with
                                these flags of ``python -m demo_hermes`` (``"--replay"``, ``"--delta-delay", "0"``
                                ...) and waits for it to listen; every process it started is stopped when the
                                test ends, passed or failed.

The process is started here and stopped by its PID: SIGTERM, a bounded wait, then SIGKILL.
"""

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import pytest

from demo_hermes.app import new_api_key
from demo_hermes.cli import API_KEY_ENV, DASHBOARD_TOKEN_ENV

__all__ = ["DemoHermesProcess"]

REPO_ROOT: Final = Path(__file__).resolve().parent.parent
READY_TIMEOUT: Final = 20.0
STOP_TIMEOUT: Final = 10.0
MAX_READY_LINE: Final = 64 * 1024


class DemoHermesProcess:
    """``python -m demo_hermes *flags`` on a free loopback port, its keys passed in its environment, its
    stderr in ``log_path``. ``start()`` (or ``with``) waits for its ready line; ``stop()`` ends it."""

    def __init__(self, log_path: Path, *flags: str, media_dir: Path | None = None) -> None:
        self.log_path = log_path
        self.flags = list(flags)
        self.api_key = new_api_key()
        self.dashboard_token = new_api_key()
        self._media_dir = media_dir
        self.ready: dict[str, Any] = {}
        self.returncode: int | None = None
        self.stdout_after_ready = b""  # what it printed after its ready line (by contract, nothing)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        return self._running().pid

    @property
    def base_url(self) -> str:
        return str(self.ready["base_url"])

    @property
    def dashboard_url(self) -> str:
        return self.base_url  # the dashboard routes are served on the same port

    @property
    def port(self) -> int:
        return int(self.ready["port"])

    @property
    def media_dir(self) -> Path:
        return Path(self.ready["media_dir"])

    @property
    def features(self) -> frozenset[str]:
        return frozenset(self.ready["features"])

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")
        return ""

    def start(self, timeout: float = READY_TIMEOUT) -> Self:
        """Start it and read its ready line; raise with the log's tail if it exits or is not ready in time."""
        if self.process is not None:
            return self
        env = {k: v for k, v in os.environ.items() if not k.startswith("DEMO_HERMES_")}
        env.update({API_KEY_ENV: self.api_key, DASHBOARD_TOKEN_ENV: self.dashboard_token})
        command = [sys.executable, "-m", "demo_hermes", "--port", "0", *self.flags]
        if self._media_dir is not None:
            command += ["--media-dir", str(self._media_dir)]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL
            )
        try:
            self.ready = json.loads(self._read_ready_line(timeout))
        except BaseException:
            self.stop()
            raise
        if self.ready.get("ready") is not True or self.ready.get("pid") != self.process.pid:
            self.stop()
            raise RuntimeError(f"not a ready line: {self.ready}")
        return self

    def _read_ready_line(self, timeout: float) -> bytes:
        process = self._running()
        assert process.stdout is not None
        fd = process.stdout.fileno()
        received = b""
        deadline = time.monotonic() + timeout
        while b"\n" not in received:
            left = deadline - time.monotonic()
            if left <= 0 or len(received) > MAX_READY_LINE:
                raise RuntimeError(f"no ready line within {timeout:g} s: {received[:200]!r} {self.log()[-2000:]}")
            readable, _, _ = select.select([fd], [], [], min(left, 0.1))
            if not readable:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                process.wait(STOP_TIMEOUT)
                raise RuntimeError(f"exited with {process.returncode} before it was ready: {self.log()[-2000:]}")
            received += chunk
        line, _, self.stdout_after_ready = received.partition(b"\n")
        return line

    def _running(self) -> "subprocess.Popen[bytes]":
        if self.process is None:
            raise RuntimeError("the demo Hermes process was not started")
        return self.process

    def signal(self, signum: signal.Signals) -> None:
        """Send ``signum`` by PID, unless it already exited."""
        process = self._running()
        if process.poll() is None:
            os.kill(process.pid, signum)

    def wait(self, timeout: float = STOP_TIMEOUT) -> int:
        """Wait (bounded) for it to exit; its exit status. Keeps what it printed after the ready line."""
        process = self._running()
        process.wait(timeout)
        if process.stdout is not None and not process.stdout.closed:
            self.stdout_after_ready += process.stdout.read()
            process.stdout.close()
        self.returncode = process.returncode
        return process.returncode

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM by PID, wait, SIGKILL (by PID) if it does not exit; its exit status (None if never started)."""
        if self.process is None:
            return None
        self.signal(signal.SIGTERM)
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            return self.wait(timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@pytest.fixture
def make_demo_hermes_process(tmp_path: Path) -> Iterator[Callable[..., DemoHermesProcess]]:
    with contextlib.ExitStack() as started:  # stops each one, even should stopping another raise
        count = 0

        def make(*flags: str, media_dir: Path | None = None) -> DemoHermesProcess:
            nonlocal count
            count += 1
            process = DemoHermesProcess(tmp_path / f"demo-hermes-{count}.log", *flags, media_dir=media_dir)
            started.callback(process.stop)  # before start(): a start that fails half-way is stopped too
            return process.start()

        yield make

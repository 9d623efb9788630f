"""What the throwaway PostgreSQL and Redis servers (tests/postgres_server.py, tests/redis_server.py) share:
a process of the tests' own in a temp dir, stopped by its PID in bounded time, its dir removed, and any
still running when the session ends stopped then. Only the process started and the processes it started
are signalled, never one found by name."""

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar, TypeVar

import psutil
import pytest

KILL_SECONDS = 10.0


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as error:
        return f"(no log: {error})"


def _alive(process: psutil.Process) -> bool:
    try:
        return bool(process.is_running()) and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_tree(process: "subprocess.Popen[bytes]") -> None:
    """SIGKILL to `process` and every process under it; returns once all are gone (10 s at most, else
    RuntimeError). `process` is reaped; the others, whose parent is init once it is gone, are waited for."""
    if process.poll() is not None:
        return
    try:
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    process.kill()
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()  # psutil checks it is still the process it listed, not a PID reused since
    process.wait(timeout=KILL_SECONDS)
    deadline = time.monotonic() + KILL_SECONDS
    while alive := [child.pid for child in children if _alive(child)]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes of PID {process.pid} outlived SIGKILL: {alive}")
        time.sleep(0.01)


def stop(process: "subprocess.Popen[bytes]", sig: signal.Signals, seconds: float) -> bool:
    """`sig` to `process`, then `kill_tree` should it not have exited within `seconds`; whether it exited
    by itself."""
    if process.poll() is not None:
        return True
    process.send_signal(sig)
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        kill_tree(process)
        return False
    return True


class ThrowawayServer(ABC):
    """A server process of the tests' own, with its files under `base`; `name` says which in errors."""

    name: ClassVar[str]
    _running: ClassVar[set["ThrowawayServer"]] = set()

    def __init__(self, base: Path) -> None:
        self.base = base
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        """The server's PID (it is running)."""
        if self._process is None or self._process.poll() is not None:
            raise RuntimeError(f"{self.name} is not running")
        return self._process.pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _started(self, process: "subprocess.Popen[bytes]", log_path: Path, ready_seconds: float) -> None:
        """Track `process`; return once it answers (`_answers`), or raise with its log's tail (it is killed)."""
        self._process = process
        ThrowawayServer._running.add(self)
        deadline = time.monotonic() + ready_seconds
        while not self._answers():
            if not self.running:
                self._reap()
                raise RuntimeError(f"{self.name} exited at start:\n{log_tail(log_path)}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{self.name} answered not within {ready_seconds:.0f} s:\n{log_tail(log_path)}")
            time.sleep(0.02)

    @abstractmethod
    def _answers(self) -> bool:
        """Whether the server answers a client now."""

    @abstractmethod
    def kill(self) -> None:
        """SIGKILL to it and every process of it."""

    @abstractmethod
    def stop(self) -> None:
        """Stop it (gracefully, else killed), keeping its files for a `start()` again."""

    def _reap(self) -> None:
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=KILL_SECONDS)
        ThrowawayServer._running.discard(self)

    def close(self) -> None:
        """Stop it and remove its dir."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


@atexit.register
def _stop_leftovers() -> None:
    for server in list(ThrowawayServer._running):
        with contextlib.suppress(Exception):
            server.close()


S = TypeVar("S", bound=ThrowawayServer)


def serving(make: Callable[[], S], env_url: str) -> Iterator[S]:
    """A fixture's server: made (skipped when `env_url` names a server the tests don't own), closed after."""
    skip_if_external(env_url)
    server = make()
    try:
        yield server
    finally:
        server.close()


def skip_if_external(env_url: str) -> None:
    """Skip a test that would stop or kill a server when `env_url` names one the tests didn't start."""
    if os.environ.get(env_url):
        pytest.skip(f"{env_url} is set: the tests use that server and start none they could stop")

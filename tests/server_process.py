"""Stopping a server process the tests started, by its PID, in bounded time: what the throwaway
PostgreSQL and Redis servers (tests/postgres_server.py, tests/redis_server.py) share. Only the process
started and the processes it started are signalled, never one found by name."""

import contextlib
import signal
import subprocess
import time
from pathlib import Path

import psutil

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

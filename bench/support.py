"""What the benchmarks share: free loopback ports, a server in a child process (started, waited for,
stopped by PID), the demo Hermes in a child process, and a file-descriptor limit raised for many connections.

The server and the demo Hermes run in processes of their own (`python -m bench.support serve|demo ...`),
so the server's CPU is that process's CPU and nothing else's, and no thread of the bench (clients
decompressing and decoding frames, the demo generating deltas) holds the server's GIL. A server child
can record the text deltas its run reader got (Hermes's `timestamp` and the time they reached the
reader) to a JSON file, written when a run's stream ends: that is how a bench times a delta's path.
"""

import asyncio
import contextlib
import itertools
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncGenerator, Callable, Coroutine
from pathlib import Path
from typing import Any, Final, Protocol

import httpx

import hermes_client as hc
from handlers.support.app import create_app
from pheby.server import serve
from pheby.settings import load_settings

REPO_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def stop_process(process: "subprocess.Popen[bytes]", timeout: float = 20) -> None:
    """Terminate by PID, wait, and kill if it does not exit."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)


def wait_until_up(
    process: "subprocess.Popen[bytes]", base_url: str, timeout: float, log_tail: Callable[[], str] = lambda: ""
) -> None:
    """Poll `GET /healthz` until it answers 200; raise (with the server's log tail) if it exits or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server at {base_url} exited with {process.returncode}:\n{log_tail()}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"the server at {base_url} did not come up:\n{log_tail()}")


def raise_nofile_limit() -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit (thousands of sockets need it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


GC_AS_CPYTHON_SETS_IT: Final = "PHEBY_BENCH_GC_UNTUNED"  # set: the server child keeps CPython's collector settings


def serve_child(flags_json: str) -> None:
    """A benchmark's `--serve-child` mode: run the server (settings from JSON flags) until SIGTERM; with
    `GC_AS_CPYTHON_SETS_IT` in its environment, without `pheby.gc_tuning` (to measure what it does)."""
    raise_nofile_limit()
    if os.environ.get(GC_AS_CPYTHON_SETS_IT):
        from pheby import gc_tuning

        gc_tuning.tune_after_start_up = lambda: None
    settings = load_settings({}, **json.loads(flags_json))
    serve(settings, create_app(settings))


# --- the server and the demo Hermes in processes of their own ---------------------------------------

RecordedDelta = tuple[str, float, float]  # delta, Hermes's timestamp, time the server's reader got it


def record_run_deltas(write: Callable[[str, list[RecordedDelta]], None]) -> None:
    """Wrap `HermesClient.run_event_batches` (in this process) so each run's text deltas, with Hermes's
    timestamp and when the reader got them, are handed to `write(hermes run id, deltas)` when its stream ends."""
    original = hc.HermesClient.run_event_batches

    async def recording(
        self: hc.HermesClient,
        run_id: str,
        last_event_id: int | str | None = None,
        *,
        read_pause: hc.ReadPause | None = None,
    ) -> AsyncGenerator[list[hc.RunEvent], None]:
        deltas: list[RecordedDelta] = []
        try:
            async for batch in original(self, run_id, last_event_id, read_pause=read_pause):
                received = time.time()
                deltas.extend((e.delta, e.timestamp, received) for e in batch if isinstance(e, hc.MessageDelta))
                yield batch
        finally:
            write(run_id, deltas)

    hc.HermesClient.run_event_batches = recording  # type: ignore[method-assign]


def write_atomically(path: Path, text: str) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)


def install_delta_recorder(path: Path) -> None:
    """Record each run's text deltas (`record_run_deltas`) to `path` as `{"seq": n, "deltas": [[delta,
    timestamp, received], ...]}` when its stream ends (n counts runs)."""
    runs = itertools.count(1)
    record_run_deltas(lambda _, deltas: write_atomically(path, json.dumps({"seq": next(runs), "deltas": deltas})))


def read_recorded_deltas(path: Path, seq: int, timeout: float) -> list[RecordedDelta]:
    """The deltas of the `seq`-th run a server child recorded (waits, bounded, for its stream to end)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError, ValueError):
            recorded = json.loads(path.read_text())
            if recorded["seq"] >= seq:
                return [(str(d), float(t), float(r)) for d, t, r in recorded["deltas"]]
        time.sleep(0.02)
    raise RuntimeError(f"the server recorded no run {seq} within {timeout:g} s")


def _wait_for_sigterm() -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.wait(1.0):
        pass


class ChildProcess:
    """A `python -m bench.support ...` child, its output in `log_path`; stopped by PID."""

    def __init__(self, arguments: list[str], log_path: Path) -> None:
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("wb") as log:
            command = [sys.executable, "-m", "bench.support", *arguments]
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-4000:]
        return ""

    def stop(self) -> None:
        stop_process(self.process)


class ServerChild(ChildProcess):
    """The server in a child process, with settings from `flags` (as `load_settings` takes them) and
    its text deltas recorded to `record_path` if given (see `install_delta_recorder`)."""

    def __init__(
        self, flags: dict[str, Any], log_path: Path, record_path: Path | None = None, timeout: float = 60
    ) -> None:
        arguments = ["serve", json.dumps(flags)] + ([str(record_path)] if record_path else [])
        super().__init__(arguments, log_path)
        self.base_url = f"http://127.0.0.1:{flags['port']}"
        try:
            wait_until_up(self.process, self.base_url, timeout, self.log_tail)
        except Exception:
            self.stop()
            raise


class DemoChild(ChildProcess):
    """The demo Hermes in a child process (`options`: `DemoOptions` fields); `base_url` once it is up."""

    def __init__(self, api_key: str, log_path: Path, timeout: float = 60, **options: Any) -> None:
        self.api_key = api_key
        port_file = log_path.with_suffix(".port")
        port_file.unlink(missing_ok=True)
        super().__init__(["demo", json.dumps({"api_key": api_key, **options}), str(port_file)], log_path)
        deadline = time.monotonic() + timeout
        while not port_file.exists() or not port_file.read_text().strip():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the demo Hermes did not start:\n{self.log_tail()}")
            time.sleep(0.05)
        self.base_url = f"http://127.0.0.1:{int(port_file.read_text())}"

    def server_flags(self, data_dir: Path, port: int, secret: str, **extra: Any) -> dict[str, Any]:
        """The flags of a server child (`ServerChild`) on `port` that reaches this demo Hermes."""
        return {
            "data_dir": str(data_dir),
            "port": port,
            "secret": secret,
            "hermes_url": self.base_url,
            "hermes_api_key": self.api_key,
            **extra,
        }


def _demo_child(options_json: str, port_file: str) -> None:
    from demo_hermes.server import DemoHermesServer  # only the demo child needs it

    with DemoHermesServer(**json.loads(options_json)) as demo:
        partial = Path(port_file + ".partial")
        partial.write_text(str(demo.port))
        os.replace(partial, port_file)
        _wait_for_sigterm()


def _serve_recording_child(flags_json: str, record_path: str | None) -> None:
    import logging

    logging.disable(logging.INFO)
    if record_path:
        install_delta_recorder(Path(record_path))
    serve_child(flags_json)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        _serve_recording_child(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
    elif sys.argv[1] == "demo":
        _demo_child(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(f"unknown child mode {sys.argv[1]!r}")


class RoundsResult(Protocol):
    def report(self) -> list[str]: ...

    def missed_targets(self) -> list[str]: ...


def run_rounds(prefix: str, keep: bool, rounds: Callable[[Path], Coroutine[Any, Any, RoundsResult]]) -> int:
    """A crash probe's rounds in a work dir of their own (kept with `keep`, its path printed), then their report;
    the exit code: 1 when a target was missed."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        result = asyncio.run(rounds(work))
    finally:
        if keep:
            print(f"data dirs and logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("\n".join(result.report()))
    return 1 if result.missed_targets() else 0

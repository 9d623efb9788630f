"""Benchmark a 64 MiB streamed put on each blob store backend.

Run: `.venv/bin/python bench/storage_put.py [--dir DIR] [--rounds N]`

Each backend runs in its own subprocess, so the peak RSS growth it reports is its own. The
moto HTTP server runs in this parent process, so the moto-server figure is the client's memory
only; moto in-process keeps the stored object inside the measured process. The baseline is a
plain buffered file write of the same 64 KiB chunks, plus fsync (a put fsyncs too).
"""

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypedDict

import anyio
import psutil
from moto import mock_aws
from moto.server import ThreadedMotoServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from storage import BlobStore, LocalDiskStore
from storage.s3 import S3Store

MiB = 1024 * 1024
SIZE = 64 * MiB
CHUNK = bytearray(range(256)) * 256  # 64 KiB, the size a request body tends to arrive in
BACKENDS = ["local", "moto", "moto-server"]


class Result(TypedDict):
    seconds: list[float]
    rss_growth: int


async def chunks() -> AsyncIterator[bytes]:
    for _ in range(SIZE // len(CHUNK)):
        yield bytes(CHUNK)  # a new object each time, as a request body delivers them


async def _one_chunk() -> AsyncIterator[bytes]:
    yield bytes(CHUNK)


def plain_write_seconds(path: Path) -> float:
    start = time.perf_counter()
    with path.open("wb") as file:
        for _ in range(SIZE // len(CHUNK)):
            file.write(bytes(CHUNK))
        file.flush()
        os.fsync(file.fileno())
    seconds = time.perf_counter() - start
    path.unlink()
    return seconds


class PeakRss:
    """Peak RSS over a block: the kernel's high-water mark when it can be reset, else sampling."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.001):
            self._peak = max(self._peak, self._process.memory_info().rss)

    def __enter__(self) -> "PeakRss":
        self.start: int = self._process.memory_info().rss
        self._peak = self.start
        self._hwm = _reset_hwm()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._hwm:
            self._peak = max(self._peak, _read_hwm())

    @property
    def growth(self) -> int:
        return self._peak - self.start


def _reset_hwm() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # Linux: reset VmHWM to the current RSS
    except OSError:
        return False
    return True


def _read_hwm() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def run_backend(backend: str, directory: Path, endpoint_url: str | None, rounds: int) -> Result:
    """Time `rounds` puts of 64 MiB (after a small warm-up) and measure the peak RSS growth."""
    os.environ.update(AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x", AWS_DEFAULT_REGION="us-east-1")
    if backend == "moto":
        with mock_aws():
            return anyio.run(_measure, lambda: _s3_store(None), rounds)
    if backend == "moto-server":
        return anyio.run(_measure, lambda: _s3_store(endpoint_url), rounds)
    return anyio.run(_measure, lambda: LocalDiskStore(directory / "blobs"), rounds)


def _s3_store(endpoint_url: str | None) -> S3Store:
    store = S3Store(f"bench-{uuid.uuid4().hex[:12]}", endpoint_url=endpoint_url)
    store.client.create_bucket(Bucket=store.bucket)
    return store


async def _measure(make_store: Callable[[], BlobStore], rounds: int) -> Result:
    store = make_store()
    await store.put("warm-up", _one_chunk(), max_size=SIZE)  # loads code and starts threads; no big buffers
    await store.delete("warm-up")
    seconds: list[float] = []
    with PeakRss() as rss:
        for round_ in range(rounds):
            start = time.perf_counter()
            await store.put(f"bench/{round_}", chunks(), max_size=SIZE)
            seconds.append(time.perf_counter() - start)
            await store.delete(f"bench/{round_}")
    await store.aclose()
    return {"seconds": seconds, "rss_growth": rss.growth}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", choices=BACKENDS, help=argparse.SUPPRESS)
    parser.add_argument("--endpoint-url", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:  # one backend, in its own process
        print(json.dumps(run_backend(args.child, args.dir, args.endpoint_url, args.rounds)))
        return

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp)
        plain = min(plain_write_seconds(directory / "plain.bin") for _ in range(args.rounds))
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
        server.start()
        try:
            host, port = server.get_host_and_port()
            results = {
                backend: _child(backend, directory, f"http://{host}:{port}", args.rounds) for backend in BACKENDS
            }
        finally:
            server.stop()

    print(f"64 MiB streamed put in 64 KiB chunks, best of {args.rounds}; 1 MB = 10^6 bytes")
    print(f"{'backend':<14}{'MB/s':>10}{'vs plain write':>16}{'peak RSS growth':>18}")
    print(f"{'plain write':<14}{SIZE / plain / 1e6:>10.0f}{1:>16.2f}{'-':>18}")
    for backend, result in results.items():
        best = min(result["seconds"])
        ratio = plain / best
        growth = result["rss_growth"] / MiB
        print(f"{backend:<14}{SIZE / best / 1e6:>10.0f}{ratio:>16.2f}{growth:>14.1f} MiB")
    print("moto keeps the stored bytes in the measured process; moto-server measures the S3 client alone.")


def _child(backend: str, directory: Path, endpoint_url: str, rounds: int) -> Result:
    command = [sys.executable, __file__, "--child", backend, "--dir", str(directory), "--rounds", str(rounds)]
    done = subprocess.run([*command, "--endpoint-url", endpoint_url], capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{backend} failed:\n{done.stderr}")
    result: Result = json.loads(done.stdout)
    return result


if __name__ == "__main__":
    main()

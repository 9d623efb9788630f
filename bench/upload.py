"""Benchmark a 64 MiB Pheby upload through the server, its memory, and PDF text extraction.

Run: `.venv/bin/python bench/upload.py [--rounds N]`

Upload. Two uvicorn servers run in subprocesses on loopback ports, both with the options of
`build_uvicorn_config` (the one `pheby serve` uses): the Pheby server (local disk storage in a temp
data dir, HERMES_URL at a closed port: uploads never call Hermes) and two bare ASGI apps as
baselines: one reads and discards the body and answers 201; the other ("durable") does the durable
work the server does and nothing else: it writes the body to a temporary file as it arrives, fsyncs
it (in a worker thread), renames it into place, fsyncs the directory and commits a row durably to
SQLite (`pheby.db.Database`, `durable=True`) before the 201. Three uvicorn servers in all. An
`httpx.AsyncClient` in this process streams 64 MiB to each as an async generator of 256 KiB chunks (so
the body is chunked, with no Content-Length), rounds rotating the order; the median time of each gives
MB/s and the server/baseline ratios. The body is `application/octet-stream`, so the server stores it
and extracts nothing.

Memory. While each upload runs, a thread samples the server subprocess's RSS every 2 ms (psutil);
the kernel's high-water mark (VmHWM, reset through /proc/<pid>/clear_refs before each round) also
catches a peak between samples. Growth = peak - RSS just before the round; the largest round counts.

Extraction. In a fresh subprocess, `pheby.files.extraction.extract_pdf` reads a 100-page text PDF made by
`tests.files.text_pdf` from memory, after a 1-page warm-up: wall time (median of 3 plain runs), then
one run for the peak RSS growth (sampled, plus VmHWM), then one under tracemalloc for the peak of
Python allocations.
"""

import argparse
import asyncio
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, MutableMapping
from pathlib import Path
from typing import Any, Final, Literal, TypedDict

import httpx
import psutil
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.support import free_port, stop_process, wait_until_up
from handlers.support.app import create_app
from pheby.db import Database, SqliteDatabase
from pheby.files.extraction import extract_pdf
from pheby.server import build_uvicorn_config
from pheby.settings import load_settings
from pheby.store.accounts import Accounts
from pheby.store.conversations import Conversations
from tests.files import text_pdf

MiB: Final = 1024 * 1024
SIZE: Final = 64 * MiB
CHUNK_SIZE: Final = 256 * 1024
WARM_UP_SIZE: Final = 1 * MiB
SECRET: Final = "bench-owner-secret-0123456789abcdef"
HERMES_URL: Final = "http://127.0.0.1:9"  # nothing listens there; uploads don't call Hermes
TARGET_RATIO: Final = 0.5
TARGET_DURABLE_RATIO: Final = 0.9
TARGET_RSS_MIB: Final = 16.0
PDF_PAGES: Final = 100
SAMPLE_SECONDS: Final = 0.002
TIMEOUT: Final = 60.0

ServerKind = Literal["pheby", "bare", "durable"]
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


# --- the servers, each run as `upload.py --serve KIND FLAGS` --------------------------------------------


async def bare_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Read and discard a request body, answer 201 (GET /healthz: 200); handle the lifespan."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    status = 200 if scope["method"] == "GET" else 201
    body = json.dumps({"size": size}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def durable_app(directory: Path) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """Like `bare_app`, but with the durable work of a Pheby upload: the body is written to a file in
    `directory`, fsynced, renamed into place and the directory fsynced (the new name survives a crash
    too), then a row is committed durably to an SQLite database (WAL, fsynced at commit, through
    `pheby.db.Database` as the server's row is), all before the 201."""
    directory.mkdir(parents=True, exist_ok=True)
    database: list[Database] = []

    async def record(name: str, size: int) -> None:
        if not database:
            db = SqliteDatabase(directory.parent / "durable.sqlite3")
            await db.open()
            await db.run(lambda c: c.execute("CREATE TABLE IF NOT EXISTS uploads (name TEXT, size INTEGER)"))
            database.append(db)
        insert = "INSERT INTO uploads (name, size) VALUES (?, ?)"
        await database[0].transaction(lambda c: c.execute(insert, (name, size)), durable=True)

    def fsync_directory() -> None:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "GET":
            await bare_app(scope, receive, send)
            return
        name = os.urandom(8).hex()
        partial, final = directory / f"{name}.part", directory / name
        size = 0
        with partial.open("wb") as file:
            more = True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    partial.unlink()
                    return
                chunk = message.get("body", b"")
                file.write(chunk)
                size += len(chunk)
                more = message.get("more_body", False)
            file.flush()
            await asyncio.to_thread(os.fsync, file.fileno())
        partial.replace(final)
        await asyncio.to_thread(fsync_directory)
        await record(name, size)
        body = json.dumps({"size": size}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 201, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


def serve(kind: ServerKind, flags_json: str) -> None:
    """Run one server in the foreground until SIGTERM; the bare apps get the very same uvicorn options."""
    settings = load_settings({}, **json.loads(flags_json))
    config = build_uvicorn_config(settings, create_app(settings))
    if kind == "bare":
        config.app = bare_app
    elif kind == "durable":
        config.app = durable_app(settings.data_dir / "blobs")  # where remove_stored_uploads looks
    uvicorn.Server(config).run()


# --- processes --------------------------------------------------------------------------------------------


class Server:
    def __init__(
        self, kind: ServerKind, process: subprocess.Popen[bytes], base_url: str, log_path: Path, data_dir: Path
    ) -> None:
        self.kind = kind
        self.data_dir = data_dir
        self.process = process
        self.psutil = psutil.Process(process.pid)
        self.base_url = base_url
        self.log_path = log_path

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


def remove_stored_uploads(server: Server) -> None:
    """Delete the stored upload files, so dirty pages and disk use don't pile up over the rounds."""
    for path in (server.data_dir / "blobs").rglob("*"):
        if path.is_file():
            path.unlink()


def start_server(kind: ServerKind, data_dir: Path, stack: contextlib.ExitStack) -> Server:
    port = free_port()
    flags = {"data_dir": str(data_dir), "port": port, "secret": SECRET, "hermes_url": HERMES_URL, "storage": "local"}
    log_path = data_dir.parent / f"{kind}.log"
    command = [sys.executable, str(Path(__file__).resolve()), "--serve", kind, json.dumps(flags)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    stack.callback(stop_process, process)
    server = Server(kind, process, f"http://127.0.0.1:{port}", log_path, data_dir)
    wait_until_up(process, server.base_url, TIMEOUT, server.log_tail)
    return server


async def prepare_data_dir(data_dir: Path) -> str:
    """Migrate the database, create the owner and one conversation; return its id."""
    db = SqliteDatabase(data_dir / "pheby.sqlite3")
    await db.open()
    try:
        owner = await Accounts(db).ensure_owner()
        conversation = await Conversations(db).create(owner.id, "bench")
    finally:
        await db.close()
    return conversation.id


# --- peak RSS of another process ---------------------------------------------------------------------------


def _status_kib(pid: int | str, field: str) -> int | None:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    return None


def _reset_hwm(pid: int | str) -> bool:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # Linux: reset VmHWM to the current RSS
    except OSError:
        return False
    return True


class PeakRss:
    """Peak RSS of process `pid` over a block: sampled in a thread, plus VmHWM when it can be reset."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._process = psutil.Process(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)
        self.start = 0
        self.sampled_peak = 0
        self.hwm_peak: int | None = None
        self.samples = 0

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            with contextlib.suppress(psutil.Error):
                self.sampled_peak = max(self.sampled_peak, self._process.memory_info().rss)
                self.samples += 1

    def __enter__(self) -> "PeakRss":
        self._hwm_reset = _reset_hwm(self._pid)
        self.start = self._process.memory_info().rss
        self.sampled_peak = self.start
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(psutil.Error):
            self.sampled_peak = max(self.sampled_peak, self._process.memory_info().rss)
        hwm = _status_kib(self._pid, "VmHWM") if self._hwm_reset else None
        self.hwm_peak = None if hwm is None else hwm * 1024

    @property
    def peak(self) -> int:
        return max(self.sampled_peak, self.hwm_peak or 0)

    @property
    def growth(self) -> int:
        return self.peak - self.start


# --- the uploads ----------------------------------------------------------------------------------------------


CHUNK: Final = bytes(range(256)) * (CHUNK_SIZE // 256)


async def body(size: int) -> AsyncIterator[bytes]:
    for _ in range(size // CHUNK_SIZE):
        yield CHUNK


class Round(TypedDict):
    seconds: float
    rss_start: int
    rss_growth: int
    sampled_growth: int
    hwm_growth: int | None
    samples: int


async def upload(client: httpx.AsyncClient, server: Server, conversation_id: str, size: int) -> float:
    params = {"conversation_id": conversation_id, "filename": "bench.bin"}
    headers = {"authorization": f"Bearer {SECRET}", "content-type": "application/octet-stream"}
    start = time.perf_counter()
    response = await client.post(f"{server.base_url}/attachments", params=params, headers=headers, content=body(size))
    seconds = time.perf_counter() - start
    if response.status_code != 201:
        raise RuntimeError(f"{server.kind}: {response.status_code} {response.text[:500]}")
    got = response.json()
    stored = got["attachment"]["size"] if server.kind == "pheby" else got["size"]
    if stored != size:
        raise RuntimeError(f"{server.kind}: stored {stored} bytes of {size}")
    return seconds


async def measured_upload(client: httpx.AsyncClient, server: Server, conversation_id: str) -> Round:
    with PeakRss(server.process.pid) as rss:
        seconds = await upload(client, server, conversation_id, SIZE)
    return {
        "seconds": seconds,
        "rss_start": rss.start,
        "rss_growth": rss.growth,
        "sampled_growth": rss.sampled_peak - rss.start,
        "hwm_growth": None if rss.hwm_peak is None else rss.hwm_peak - rss.start,
        "samples": rss.samples,
    }


async def run_uploads(servers: list[Server], conversation_id: str, rounds: int) -> dict[ServerKind, list[Round]]:
    results: dict[ServerKind, list[Round]] = {server.kind: [] for server in servers}
    limits = httpx.Limits(max_connections=4, max_keepalive_connections=4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(TIMEOUT), limits=limits) as client:
        for server in servers:  # loads the code paths and opens the connection; not measured
            await upload(client, server, conversation_id, WARM_UP_SIZE)
        await asyncio.sleep(0.5)
        for round_ in range(rounds):
            order = servers[round_ % len(servers) :] + servers[: round_ % len(servers)]
            for server in order:
                results[server.kind].append(await measured_upload(client, server, conversation_id))
                remove_stored_uploads(server)  # each round starts from the same disk state
                await asyncio.sleep(0.3)  # let the server settle (the next baseline is read after this)
    return results


def disk_write_seconds(directory: Path) -> float:
    """Reference: a plain 64 MiB file write in 1 MiB pieces plus fsync, as the local store does."""
    path = directory / "plain.bin"
    piece = CHUNK * (MiB // CHUNK_SIZE)
    start = time.perf_counter()
    with path.open("wb") as file:
        for _ in range(SIZE // MiB):
            file.write(piece)
        file.flush()
        os.fsync(file.fileno())
    seconds = time.perf_counter() - start
    path.unlink()
    return seconds


# --- PDF extraction, run as `upload.py --pdf-child` -----------------------------------------------------------


class PdfResult(TypedDict):
    pdf_bytes: int
    status: str
    chars: int
    seconds: list[float]
    rss_growth: int
    tracemalloc_peak: int
    traced_seconds: float


def pdf_child() -> PdfResult:
    pages = [
        f"Page {n}: the quick brown fox jumps over the lazy dog, line {n} of {PDF_PAGES}." for n in range(PDF_PAGES)
    ]
    data = text_pdf(pages)
    extract_pdf(io.BytesIO(text_pdf(["warm-up"])))  # lazy imports and caches; not measured
    seconds: list[float] = []
    for _ in range(3):
        start = time.perf_counter()
        result = extract_pdf(io.BytesIO(data))
        seconds.append(time.perf_counter() - start)
    with PeakRss(os.getpid()) as rss:  # a run of its own: the sampler thread takes the GIL now and then
        extract_pdf(io.BytesIO(data))
    tracemalloc.start()
    start = time.perf_counter()
    extract_pdf(io.BytesIO(data))
    traced_seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "pdf_bytes": len(data),
        "status": result.status,
        "chars": len(result.text or ""),
        "seconds": seconds,
        "rss_growth": rss.growth,
        "tracemalloc_peak": peak,
        "traced_seconds": traced_seconds,
    }


def run_pdf_child(stack: contextlib.ExitStack) -> PdfResult:
    command = [sys.executable, str(Path(__file__).resolve()), "--pdf-child"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    stack.callback(stop_process, process)
    stdout, stderr = process.communicate(timeout=TIMEOUT)
    if process.returncode:
        raise RuntimeError(f"the PDF child failed:\n{stderr.decode(errors='replace')[-4000:]}")
    result: PdfResult = json.loads(stdout)
    return result


# --- report ------------------------------------------------------------------------------------------------


def mb_per_s(seconds: float) -> float:
    return SIZE / seconds / 1e6


def mib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / MiB:.1f}"


def report(results: dict[ServerKind, list[Round]], rounds: int, disk_seconds: float, pdf: PdfResult) -> None:
    print(f"64 MiB upload, chunked, 256 KiB client chunks, median of {rounds}; 1 MB = 10^6 bytes")
    print(f"{'server':<8}{'median MB/s':>13}   rounds (MB/s) / RSS growth per round (MiB)")
    medians: dict[ServerKind, float] = {}
    for kind, rows in results.items():
        medians[kind] = statistics.median(row["seconds"] for row in rows)
        speeds = " ".join(f"{mb_per_s(row['seconds']):.0f}" for row in rows)
        growths = " ".join(mib(row["rss_growth"]) for row in rows)
        print(f"{kind:<8}{mb_per_s(medians[kind]):>13.0f}   {speeds} / {growths}")
    print(f"reference: plain 64 MiB file write + fsync in this process: {mb_per_s(disk_seconds):.0f} MB/s")
    ratio = medians["bare"] / medians["pheby"]
    verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
    print(f"throughput ratio pheby/bare: {ratio:.2f} (target >= {TARGET_RATIO}): {verdict}")
    durable = medians["durable"] / medians["pheby"]
    verdict = "met" if durable >= TARGET_DURABLE_RATIO else "NOT met"
    print(f"throughput ratio pheby/durable: {durable:.2f} (target >= {TARGET_DURABLE_RATIO}): {verdict}")

    pheby = results["pheby"]
    worst = max(row["rss_growth"] for row in pheby)
    print("pheby server RSS during each 64 MiB upload (MiB): baseline / sampled peak growth / VmHWM growth")
    for row in pheby:
        print(
            f"  {mib(row['rss_start']):>7} / {mib(row['sampled_growth']):>6} / {mib(row['hwm_growth']):>6}"
            f"   ({row['samples']} samples)"
        )
    verdict = "met" if worst / MiB <= TARGET_RSS_MIB else "NOT met"
    print(f"pheby server peak RSS growth: {worst / MiB:.1f} MiB (target <= {TARGET_RSS_MIB:g} MiB): {verdict}")

    median_pdf = statistics.median(pdf["seconds"])
    print(
        f"extract_pdf, {PDF_PAGES}-page text PDF ({pdf['pdf_bytes'] / 1024:.0f} KiB) -> {pdf['status']}, "
        f"{pdf['chars']} chars"
    )
    runs = " ".join(f"{s * 1000:.0f}" for s in pdf["seconds"])
    print(f"  wall time: {median_pdf * 1000:.0f} ms median ({runs} ms); {median_pdf / PDF_PAGES * 1000:.2f} ms/page")
    print(f"  peak RSS growth: {mib(pdf['rss_growth'])} MiB")
    print(
        f"  tracemalloc peak: {mib(pdf['tracemalloc_peak'])} MiB "
        f"(traced run {pdf['traced_seconds'] * 1000:.0f} ms, tracing slows it)"
    )


@contextlib.contextmanager
def temp_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="pheby-bench-upload-") as tmp:
        yield Path(tmp)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", nargs=2, metavar=("KIND", "FLAGS"), help=argparse.SUPPRESS)
    parser.add_argument("--pdf-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.serve:
        kind, flags_json = args.serve
        if kind not in ("pheby", "bare", "durable"):
            parser.error(f"unknown server kind {kind!r}")
        serve(kind, flags_json)
        return
    if args.pdf_child:
        print(json.dumps(pdf_child()))
        return

    with temp_dir() as tmp, contextlib.ExitStack() as stack:
        data_dir = tmp / "data"
        data_dir.mkdir()
        conversation_id = asyncio.run(prepare_data_dir(data_dir))
        servers = [
            start_server("pheby", data_dir, stack),
            start_server("bare", tmp / "bare-data", stack),
            start_server("durable", tmp / "durable-data", stack),
        ]
        try:
            results = asyncio.run(run_uploads(servers, conversation_id, args.rounds))
        except Exception:
            for server in servers:
                print(f"--- {server.kind} server log ---\n{server.log_tail()}", file=sys.stderr)
            raise
        stack.close()  # stop the servers before the disk and PDF measurements
        disk_seconds = min(disk_write_seconds(tmp) for _ in range(2))
        pdf = run_pdf_child(stack)
    report(results, args.rounds, disk_seconds, pdf)


if __name__ == "__main__":
    main()

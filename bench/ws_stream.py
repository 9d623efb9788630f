"""Benchmark the latency the server adds to each streamed delta, and the memory of idle connections.

Run: `.venv/bin/python bench/ws_stream.py [--rounds N] [--words N] [--connections N] [--no-compression]`

Latency. The demo Hermes and the server (uvicorn from `build_uvicorn_config`, as `pheby serve` builds
it) run in processes of their own, the clients in this one (so their decoding and decompression
never hold the server's GIL); one machine, one clock. A delta's emission time is the `timestamp`
Hermes puts on its `message.delta`. The reply is the demo's echo of a long
plain message, one word per delta at the demo's default pacing (10 ms).
- direct: the bench starts the run on the demo Hermes and reads its SSE with `HermesClient.run_events`;
  latency = arrival - timestamp.
- server: with the delta window at 0 (`ws_delta_window_ms`: every Hermes delta forwarded, so this is
  the path's own latency; bench/stream_bytes.py measures coalescing), a WebSocket client (or ten,
  all of the owner account) sends `chat.send`; latency of each
  `message.delta` frame = arrival - timestamp of the Hermes delta that made that (cumulative, visible)
  text. The bench finds that timestamp by wrapping `HermesClient.run_event_batches` in the server's process
  (`bench.support.install_delta_recorder`: events pass through unchanged, the deltas are written to a
  file when the run's stream ends) and replaying the deltas through `pheby.files.media_tags.visible_draft`,
  as the server does. The wrapper also notes when the server's reader got each event, which splits
  the server-path latency into Hermes -> server reader and server reader -> client.
Deltas emitted before the path's stream consumer got its first event are left out (Hermes buffers a
run's events from its creation, so they measure the subscription, not the stream); the first-delta
latency is printed on its own. Cases alternate round by round.

Memory. The server runs in a subprocess (RLIMIT_NOFILE raised to the hard limit); after start-up and
a few warm-up connections its RSS is read, then N connections say hello and get `ready` (with the API
tokens of N/30 + 1 accounts made in its data dir first, as an account may hold only 32 connections),
and the RSS is read again: (after - before) / N. Measured once with the websockets client's
default (it offers permessage-deflate; the bench checks the server accepted it) and once without compression.
"""

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, Literal

import msgspec
import psutil
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import hermes_client as hc
from bench.support import (
    DemoChild,
    ServerChild,
    free_port,
    raise_nofile_limit,
    read_recorded_deltas,
    serve_child,
    stop_process,
    wait_until_up,
)
from pheby.db import SqliteDatabase
from pheby.files.media_tags import visible_draft
from pheby.store.accounts import Accounts

SECRET: Final = "bench-owner-secret-0123456789abcdef"
TARGET_ADDED_P99_MS: Final = 2.0
TARGET_KIB_PER_CONNECTION: Final = 64.0
TIMEOUT: Final = 60.0
OPEN_CONCURRENCY: Final = 6  # the server lets a source address hold 8 sockets that have not said hello
WORDS: Final = (
    "streaming", "tokens", "reach", "the", "phone", "through", "a", "WebSocket", "while", "Hermes", "keeps",
    "thinking;", "each", "delta", "carries", "whole", "draft", "so", "far,", "and", "clients", "render", "it.",
)  # fmt: skip

Compression = Literal["deflate"] | None


# --- timing the server path: the deltas the server child recorded --------------------------------------


class Recorded:
    """Where the server child records its runs' deltas, and how many runs it has recorded."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.runs = 0

    async def next_run(self) -> list[tuple[str, float, float]]:
        self.runs += 1
        return await asyncio.to_thread(read_recorded_deltas, self.path, self.runs, TIMEOUT)


def times_by_visible_text(deltas: Sequence[tuple[str, float, float]]) -> dict[str, tuple[float, float]]:
    """Visible draft -> (Hermes timestamp, server receipt) of the delta that first produced it."""
    raw = ""
    table: dict[str, tuple[float, float]] = {}
    for delta, timestamp, received in deltas:
        raw += delta
        table.setdefault(visible_draft(raw), (timestamp, received))
    return table


# --- a lean Pheby client: stamps each frame's arrival before anything else --------------------------


class Frame(msgspec.Struct):
    type: str
    request_id: str | None = None
    conversation_id: str | None = None
    text: str | None = None


FRAME_DECODER: Final = msgspec.json.Decoder(Frame)
_request_ids = itertools.count(1)


async def open_socket(url: str, compression: Compression, secret: str = SECRET) -> ClientConnection:
    """Connect and authenticate (as the owner by default); returns once `ready` has arrived."""
    ws = await connect(url, max_size=None, compression=compression, open_timeout=TIMEOUT)
    if compression is not None and not ws.protocol.extensions:
        await ws.close()
        raise RuntimeError("the server did not accept permessage-deflate")
    hello = {"type": "hello", "request_id": "hello", "secret": secret, "protocol_version": 1}
    await ws.send(json.dumps(hello))
    raw = await asyncio.wait_for(ws.recv(), TIMEOUT)
    first = FRAME_DECODER.decode(raw)
    if first.type != "ready":
        await ws.close()
        raise RuntimeError(f"hello was answered with {raw!r}")
    return ws


class Client:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.frames: list[tuple[float, Frame]] = []
        self.run_finished = asyncio.Event()
        self._waiters: dict[str, asyncio.Future[Frame]] = {}
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, url: str, compression: Compression) -> "Client":
        return cls(await open_socket(url, compression))

    async def _read(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for raw in self.ws:
                arrived = time.time()
                frame = FRAME_DECODER.decode(raw)
                self.frames.append((arrived, frame))
                if frame.type == "run.finished":
                    self.run_finished.set()
                waiter = self._waiters.pop(frame.request_id, None) if frame.request_id else None
                if waiter is not None and not waiter.done():
                    waiter.set_result(frame)

    async def request(self, type_: str, **fields: Any) -> Frame:
        request_id = f"r{next(_request_ids)}"
        waiter: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        self._waiters[request_id] = waiter
        await self.ws.send(json.dumps({"type": type_, "request_id": request_id, **fields}))
        reply = await asyncio.wait_for(waiter, TIMEOUT)
        if reply.type == "error":
            raise RuntimeError(f"{type_} failed: {reply}")
        return reply

    async def close(self) -> None:
        await self.ws.close()
        await asyncio.wait_for(self._reader, TIMEOUT)


# --- the latency cases ---------------------------------------------------------------------------------


class Samples:
    def __init__(self) -> None:
        self.total: list[float] = []  # emission -> arrival at the (SSE or WebSocket) client
        self.upstream: list[float] = []  # emission -> the server's run reader (server path only)
        self.downstream: list[float] = []  # the server's run reader -> the WebSocket client
        self.first: list[float] = []  # the first delta of each run (client 0), emission -> arrival
        self.skipped = 0  # deltas emitted before the stream consumer got its first event
        self.unmatched = 0  # WebSocket deltas whose text no recorded Hermes delta produced


def message_text(words: int, seed: int) -> str:
    return " ".join(WORDS[(seed + i * 7) % len(WORDS)] for i in range(words))


async def direct_run(hermes: hc.HermesClient, text: str, samples: Samples | None) -> None:
    handle = await hermes.create_run(text)
    arrivals: list[tuple[float, float]] = []
    async for event in hermes.run_events(handle.run_id):
        if type(event) is hc.MessageDelta:
            arrivals.append((time.time(), event.timestamp))
    if samples is None or not arrivals:
        return
    subscribed = arrivals[0][0]
    samples.first.append(arrivals[0][0] - arrivals[0][1])
    for arrived, timestamp in arrivals:
        if timestamp < subscribed:
            samples.skipped += 1
        else:
            samples.total.append(arrived - timestamp)


async def server_run(clients: list[Client], text: str, samples: Samples | None, recorded_runs: Recorded) -> None:
    driver = clients[0]
    created = await driver.request("conversation.create", name="bench")
    conversation_id = created.conversation_id
    for client in clients:
        client.run_finished.clear()
    marks = [len(client.frames) for client in clients]
    await driver.request("chat.send", conversation_id=conversation_id, text=text)
    await asyncio.wait_for(asyncio.gather(*(client.run_finished.wait() for client in clients)), TIMEOUT)
    recorded = await recorded_runs.next_run()
    if samples is None:
        return
    table = times_by_visible_text(recorded)
    subscribed = recorded[0][2] if recorded else 0.0
    for index, (client, mark) in enumerate(zip(clients, marks, strict=True)):
        first = True
        for arrived, frame in client.frames[mark:]:
            if frame.type != "message.delta" or frame.conversation_id != conversation_id:
                continue
            times = table.get(frame.text or "")
            if times is None:
                samples.unmatched += 1
                continue
            timestamp, received = times
            if first and index == 0:
                samples.first.append(arrived - timestamp)
            first = False
            if timestamp < subscribed:
                samples.skipped += 1
                continue
            samples.total.append(arrived - timestamp)
            samples.upstream.append(received - timestamp)
            samples.downstream.append(arrived - received)


async def latency_cases(
    ws_url: str, demo: DemoChild, recorded: Recorded, args: argparse.Namespace
) -> tuple[dict[str, Samples], int]:
    cases = {"direct SSE": Samples(), "server, 1 client": Samples(), f"server, {args.clients} clients": Samples()}
    direct, one, many = cases.values()
    hermes = hc.HermesClient(demo.base_url, demo.api_key)
    clients = [await Client.open(ws_url, args.compression)]
    try:
        warm = message_text(20, 0)
        await direct_run(hermes, warm, None)
        await server_run(clients, warm, None, recorded)
        for round_ in range(args.rounds):
            text = message_text(args.words, round_)
            await direct_run(hermes, text, direct)
            await server_run(clients, text, one, recorded)
            # One at a time: a source address may hold only 8 sockets that have not said hello yet.
            extra = [await Client.open(ws_url, args.compression) for _ in range(args.clients - 1)]
            try:
                await server_run([*clients, *extra], text, many, recorded)
            finally:
                await asyncio.gather(*(client.close() for client in extra))
    finally:
        await asyncio.gather(*(client.close() for client in clients))
        await hermes.aclose()
    return cases, len(message_text(args.words, 0).split()) + 2  # + "You " and "said: "


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def report_latency(cases: dict[str, Samples], deltas_per_run: int, args: argparse.Namespace) -> None:
    ms = 1000.0
    print(
        f"per-delta latency, Hermes emission -> client arrival, in ms: {args.rounds} runs per case of "
        f"{deltas_per_run} deltas, {args.delta_delay * 1000:g} ms apart; WebSocket compression: "
        f"{args.compression or 'none'}"
    )
    print(
        f"{'case':<22}{'samples':>8}{'p50':>8}{'p99':>8}{'added p50':>11}{'added p99':>11}"
        f"{'ratio p50':>11}{'ratio p99':>11}{'first delta p50':>17}"
    )
    direct = cases["direct SSE"]
    d50, d99 = percentile(direct.total, 50), percentile(direct.total, 99)
    added_p99: dict[str, float] = {}
    for name, samples in cases.items():
        p50, p99 = percentile(samples.total, 50), percentile(samples.total, 99)
        first = statistics.median(samples.first) * ms
        if samples is direct:
            added = f"{'-':>11}{'-':>11}{'-':>11}{'-':>11}"
        else:
            added = f"{(p50 - d50) * ms:>11.2f}{(p99 - d99) * ms:>11.2f}{p50 / d50:>11.2f}{p99 / d99:>11.2f}"
        print(f"{name:<22}{len(samples.total):>8}{p50 * ms:>8.2f}{p99 * ms:>8.2f}{added}{first:>17.2f}")
        if samples is not direct:
            added_p99[name] = (p99 - d99) * ms
    print("server path split at the server's run reader (ms):")
    for name, samples in cases.items():
        if samples.upstream:
            up50, up99 = percentile(samples.upstream, 50) * ms, percentile(samples.upstream, 99) * ms
            dn50, dn99 = percentile(samples.downstream, 50) * ms, percentile(samples.downstream, 99) * ms
            print(
                f"  {name:<20} Hermes -> reader p50 {up50:.2f} p99 {up99:.2f}; "
                f"reader -> client p50 {dn50:.2f} p99 {dn99:.2f}"
            )
    skipped = ", ".join(f"{name} {samples.skipped}" for name, samples in cases.items())
    print(f"left out (emitted before the consumer's first event): {skipped}")
    unmatched = sum(samples.unmatched for samples in cases.values())
    if unmatched:
        print(f"WARNING: {unmatched} WebSocket deltas matched no recorded Hermes delta")
    for name, added_ms in added_p99.items():
        verdict = "met" if added_ms <= TARGET_ADDED_P99_MS else "NOT met"
        print(f"target: p99 added <= {TARGET_ADDED_P99_MS:g} ms, {name}: {verdict} ({added_ms:.2f} ms)")


# --- memory per idle connection, in a subprocess --------------------------------------------------


async def open_many(url: str, count: int, compression: Compression, secrets: Sequence[str]) -> list[ClientConnection]:
    """`count` sockets, said hello with `secrets` in turn (an account may hold only 32 connections)."""
    gate = asyncio.Semaphore(OPEN_CONCURRENCY)

    async def one(secret: str) -> ClientConnection:
        async with gate:
            return await open_socket(url, compression, secret)

    results = await asyncio.gather(*(one(secrets[i % len(secrets)]) for i in range(count)), return_exceptions=True)
    sockets = [r for r in results if isinstance(r, ClientConnection)]
    failures = [r for r in results if not isinstance(r, ClientConnection)]
    if failures:
        await close_many(sockets)
        raise RuntimeError(f"{len(failures)} of {count} connections failed, e.g. {failures[0]!r}")
    return sockets


async def close_many(sockets: list[ClientConnection]) -> None:
    gate = asyncio.Semaphore(OPEN_CONCURRENCY * 4)

    async def one(ws: ClientConnection) -> None:
        async with gate:
            with contextlib.suppress(Exception):
                await ws.close()

    await asyncio.gather(*(one(ws) for ws in sockets))


async def api_tokens(data_dir: Path, accounts: int) -> list[str]:
    """Make `accounts` accounts in the data dir's database, each with an API token; return the tokens."""
    db = SqliteDatabase(data_dir / "pheby.sqlite3")
    await db.open()
    try:
        store = Accounts(db)
        tokens = []
        for index in range(accounts):
            account = await store.create(f"bench-{index}")
            tokens.append((await store.issue_token(account.id, "api", None)).token)
        return tokens
    finally:
        await db.close()


async def connection_memory(
    process: psutil.Process, ws_url: str, count: int, compression: Compression, secrets: Sequence[str]
) -> tuple[int, int]:
    warm = await open_many(ws_url, 10, compression, secrets)
    await close_many(warm)
    await asyncio.sleep(1.0)
    before = process.memory_info().rss
    sockets = await open_many(ws_url, count, compression, secrets)
    try:
        await asyncio.sleep(2.0)
        after = process.memory_info().rss
    finally:
        await close_many(sockets)
    return before, after


def measure_memory(demo: DemoChild, data_dir: Path, count: int, compression: Compression) -> tuple[int, int]:
    port = free_port()
    flags = demo.server_flags(data_dir, port, SECRET, ws_hello_timeout=30.0)
    data_dir.mkdir(parents=True, exist_ok=True)
    secrets = asyncio.run(api_tokens(data_dir, count // 30 + 1))
    log_path = data_dir / "server.log"
    with log_path.open("wb") as log:
        command = [sys.executable, str(Path(__file__).resolve()), "--serve-child", json.dumps(flags)]
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until_up(process, f"http://127.0.0.1:{port}", TIMEOUT)
        return asyncio.run(
            connection_memory(psutil.Process(process.pid), f"ws://127.0.0.1:{port}/ws", count, compression, secrets)
        )
    except Exception:
        print(log_path.read_text(errors="replace")[-4000:], file=sys.stderr)
        raise
    finally:
        stop_process(process)


def report_memory(results: dict[str, tuple[int, int]], count: int) -> None:
    print(f"server RSS per idle authenticated connection, {count} connections (server in a subprocess):")
    verdicts: list[str] = []
    for label, (before, after) in results.items():
        per = (after - before) / count / 1024
        verdicts.append(f"{label}: {'met' if per <= TARGET_KIB_PER_CONNECTION else 'NOT met'}")
        print(f"  {label:<40} before {before / 2**20:7.1f} MiB  after {after / 2**20:7.1f} MiB  {per:6.1f} KiB each")
    print(f"target: <= {TARGET_KIB_PER_CONNECTION:g} KiB per idle connection: {'; '.join(verdicts)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="runs per latency case")
    parser.add_argument("--words", type=int, default=250, help="words (deltas) in each echoed reply")
    parser.add_argument("--clients", type=int, default=10, help="connections in the fan-out case")
    parser.add_argument("--delta-delay", type=float, default=0.01, help="the demo Hermes's delta pacing")
    parser.add_argument("--connections", type=int, default=1000, help="idle connections for the memory figure")
    parser.add_argument("--no-compression", dest="compression", action="store_const", const=None, default="deflate")
    parser.add_argument("--serve-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_child:
        serve_child(args.serve_child)
        return

    raise_nofile_limit()
    logging.disable(logging.INFO)  # no line per Hermes request or scheduler step in the output
    with tempfile.TemporaryDirectory(prefix="pheby-bench-") as tmp:
        api_key = "bench-demo-key-0123456789abcdef"
        demo = DemoChild(api_key, Path(tmp) / "demo.log", delta_delay=args.delta_delay)
        try:
            port = free_port()
            # Every delta forwarded (window 0): the latency of the path itself, not of coalescing.
            flags = demo.server_flags(Path(tmp) / "latency", port, SECRET, ws_hello_timeout=30.0, ws_delta_window_ms=0)
            recorded = Recorded(Path(tmp) / "deltas.json")
            server = ServerChild(flags, Path(tmp) / "server.log", recorded.path)
            try:
                cases, deltas_per_run = asyncio.run(latency_cases(f"ws://127.0.0.1:{port}/ws", demo, recorded, args))
            finally:
                server.stop()
            report_latency(cases, deltas_per_run, args)
            memory = {
                "websockets default (permessage-deflate)": measure_memory(
                    demo, Path(tmp) / "mem-deflate", args.connections, "deflate"
                ),
                "no compression": measure_memory(demo, Path(tmp) / "mem-plain", args.connections, None),
            }
        finally:
            demo.stop()
    report_memory(memory, args.connections)


if __name__ == "__main__":
    main()

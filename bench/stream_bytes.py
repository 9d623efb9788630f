"""Benchmark what a long streamed answer costs a client, on the wire, and the server, in CPU.

Run: `.venv/bin/python bench/stream_bytes.py [--rounds N] [--words N] [--window-ms N] [--clients N]`

Two servers (uvicorn from `build_uvicorn_config`, as `pheby serve` builds it) run in processes of their
own, the demo Hermes in a third, alike but for the delta window: the default (`--window-ms`, 100)
and 0 (every Hermes delta forwarded, as before coalescing). One WebSocket client (or `--clients`,
all of the owner account, so all receive the run), with permessage-deflate offered or not, sends
`chat.send` with `/demo echo` of N words: the demo streams the echo one word per delta, 10 ms apart.
Cases alternate round by round.

- frames / payload: the `message.delta` frames the client got, and the payload bytes of every frame
  of the run (after decompression); wire: the bytes the server sent for the run, counted by a TCP
  proxy between client and server (after compression, WebSocket framing included); each as a
  multiple of the answer's size (the UTF-8 bytes of its final text).
- latency: for every Hermes delta, the time from its emission (the `timestamp` the demo puts on
  it, same clock) to the arrival of the first frame whose text is at least as long as the visible
  draft after that delta (the server child records each delta's timestamp, see
  `bench.support.install_delta_recorder`; one clock, one machine); deltas emitted before the
  server's reader got its first event are left out. "added" is the coalescing case minus the
  window-0 case.
- CPU: the server process's CPU time (user + system, all its threads, from /proc via psutil) over
  the run; the demo Hermes and the clients are other processes. As a ratio to the window-0 case with
  the same compression. It includes reading the run's SSE stream from Hermes and what the
  server spends with nothing to do (pollers, uvicorn's tick) while the answer streams. For the
  second, each server is first watched idle for a few seconds; an informational line gives the ratio
  with that idle spending, over each run's time, taken off both sides (the target is the plain ratio).
"""

import argparse
import asyncio
import contextlib
import json
import logging
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import psutil
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.support import DemoChild, ServerChild, free_port, read_recorded_deltas
from bench.ws_stream import SECRET, Compression, message_text, percentile
from pheby.files.media_tags import visible_draft

TIMEOUT: Final = 120.0
TARGET_WIRE_DEFLATE: Final = 3.0
TARGET_WIRE_PLAIN: Final = 150.0
TARGET_ADDED_P99_MS: Final = 120.0
TARGET_CPU_RATIO: Final = 0.25
IDLE_SECONDS: Final = 5.0  # how long each server is watched with nothing to do


# --- a TCP proxy that counts the bytes the server sends ---------------------------------------------


class CountingProxy:
    """Forwards loopback connections to the server; `downstream` counts server -> client bytes."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.downstream = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        await asyncio.gather(
            self._pipe(client_reader, server_writer, count=False),
            self._pipe(server_reader, client_writer, count=True),
            return_exceptions=True,
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, count: bool) -> None:
        try:
            while data := await reader.read(65536):
                if count:
                    self.downstream += len(data)
                writer.write(data)
                await writer.drain()
        finally:
            with contextlib.suppress(Exception):
                writer.close()


# --- the client ---------------------------------------------------------------------------------


@dataclass
class RunResult:
    answer_bytes: int = 0
    delta_frames: int = 0
    payload_bytes: int = 0
    wire_bytes: int = 0
    cpu_seconds: float = 0.0
    seconds: float = 0.0  # wall time from chat.send to the last client's run.finished
    latencies: list[float] = field(default_factory=list)


class Client:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.frames: list[tuple[float, int, dict[str, object]]] = []  # arrival, payload bytes, frame
        self.changed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, url: str, compression: Compression) -> "Client":
        ws = await connect(url, max_size=None, compression=compression, open_timeout=TIMEOUT)
        await ws.send(json.dumps({"type": "hello", "request_id": "h", "secret": SECRET, "protocol_version": 1}))
        if json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))["type"] != "ready":
            raise RuntimeError("hello failed")
        return cls(ws)

    async def _read(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for raw in self.ws:
                arrived = time.time()
                self.frames.append((arrived, len(raw), json.loads(raw)))
                self.changed.set()

    async def wait_for(self, type_: str, start: int) -> dict[str, object]:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            for _, _, frame in self.frames[start:]:
                if frame["type"] in (type_, "error"):
                    if frame["type"] == "error":
                        raise RuntimeError(f"error frame: {frame}")
                    return frame
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 1.0)
        raise RuntimeError(f"no {type_} within {TIMEOUT:g} s")

    async def close(self) -> None:
        await self.ws.close()
        await asyncio.wait_for(self._reader, TIMEOUT)


class Server:
    """A server child and what the bench reads of it: its CPU and its recorded deltas."""

    def __init__(self, child: ServerChild, record_path: Path) -> None:
        self.child = child
        self.process = psutil.Process(child.pid)
        self.record_path = record_path
        self.runs = 0
        self.idle_cpu_rate = 0.0  # CPU seconds per second with no client connected (pollers, uvicorn's tick)

    def cpu(self) -> float:
        times = self.process.cpu_times()
        return float(times.user + times.system)


async def one_run(clients: list[Client], proxy: CountingProxy, server: Server, text: str) -> RunResult:
    """One run, started by the first client and received by all; figures of the first client (wire: the mean)."""
    client = clients[0]
    start = len(client.frames)
    await client.ws.send(json.dumps({"type": "conversation.create", "request_id": "c", "name": "bench"}))
    created = await client.wait_for("conversation.created", start)
    marks = [len(c.frames) for c in clients]
    start = marks[0]
    wire_before, cpu_before, began = proxy.downstream, server.cpu(), time.monotonic()
    chat = {"type": "chat.send", "request_id": "s", "conversation_id": created["conversation_id"], "text": text}
    await client.ws.send(json.dumps(chat))
    complete = await client.wait_for("message.complete", start)
    for other, mark in zip(clients, marks, strict=True):
        await other.wait_for("run.finished", mark)
    await asyncio.sleep(0.2)  # the last bytes through the proxy
    result = RunResult(
        wire_bytes=(proxy.downstream - wire_before) // len(clients),
        cpu_seconds=server.cpu() - cpu_before,
        seconds=time.monotonic() - began,
    )
    server.runs += 1
    recorded = await asyncio.to_thread(read_recorded_deltas, server.record_path, server.runs, TIMEOUT)
    frames = client.frames[start:]
    result.answer_bytes = len(str(complete["text"]).encode())
    result.payload_bytes = sum(size for _, size, _ in frames)
    arrivals = [(arrived, len(str(f["text"]))) for arrived, _, f in frames if f["type"] == "message.delta"]
    result.delta_frames = len(arrivals)
    raw, subscribed = "", recorded[0][2] if recorded else 0.0
    index = 0
    for delta, timestamp, _ in recorded:
        raw += delta
        wanted = len(visible_draft(raw))
        while index < len(arrivals) and arrivals[index][1] < wanted:
            index += 1
        if index == len(arrivals):
            break  # text the client never saw as a delta (it came with message.complete)
        if timestamp >= subscribed:
            result.latencies.append(arrivals[index][0] - timestamp)
    return result


async def bench(
    args: argparse.Namespace, ports: dict[int, int], servers: dict[int, Server]
) -> dict[str, list[RunResult]]:
    text = "/demo echo " + message_text(args.words, 0)
    results: dict[str, list[RunResult]] = {}
    proxies = {window: CountingProxy(port) for window, port in ports.items()}
    for proxy in proxies.values():
        await proxy.start()
    try:
        for server in servers.values():  # what the server spends with nothing to do, for the informational ratio
            before = server.cpu()
            await asyncio.sleep(IDLE_SECONDS)
            server.idle_cpu_rate = (server.cpu() - before) / IDLE_SECONDS
        modes: tuple[Compression, ...] = ("deflate", None)
        cases = [(window, compression) for window in proxies for compression in modes]
        warm = "/demo echo " + message_text(20, 1)
        for round_ in range(args.rounds + 1):
            for window, compression in cases:
                # Only this case's clients are open: every connection of the account gets the run's events.
                url = f"ws://127.0.0.1:{proxies[window].port}/ws"
                clients = [await Client.open(url, compression) for _ in range(args.clients)]
                try:
                    result = await one_run(clients, proxies[window], servers[window], warm if round_ == 0 else text)
                finally:
                    for client in clients:
                        await client.close()
                if round_ > 0:
                    results.setdefault(label(window, compression), []).append(result)
    finally:
        for proxy in proxies.values():
            await proxy.stop()
    return results


def label(window: int, compression: Compression) -> str:
    return f"window {window} ms, {'deflate' if compression else 'no compression'}"


def report(results: dict[str, list[RunResult]], args: argparse.Namespace, servers_idle: dict[int, float]) -> None:
    ms = 1000.0
    first = next(iter(results.values()))[0]
    print(
        f"a /demo echo of {args.words} words ({first.answer_bytes} bytes of answer), one word per delta, "
        f"{args.rounds} runs per case, {args.clients} client(s) receiving each; sizes per client as multiples "
        "of the answer (median of the runs)"
    )
    print(
        f"{'case':<34}{'delta frames':>13}{'payload':>10}{'wire':>9}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'CPU s':>8}{'CPU ratio':>11}"
    )
    figures: dict[str, tuple[float, float, float, float]] = {}
    for compression in ("deflate", None):
        base = results[label(0, compression)]
        base_cpu = statistics.median(r.cpu_seconds for r in base)
        for window in (args.window_ms, 0):
            runs = results[label(window, compression)]
            latencies = [x for r in runs for x in r.latencies]
            p50, p99 = percentile(latencies, 50) * ms, percentile(latencies, 99) * ms
            frames = statistics.median(r.delta_frames for r in runs)
            payload = statistics.median(r.payload_bytes / r.answer_bytes for r in runs)
            wire = statistics.median(r.wire_bytes / r.answer_bytes for r in runs)
            cpu = statistics.median(r.cpu_seconds for r in runs)
            figures[label(window, compression)] = (wire, p50, p99, cpu / base_cpu)
            print(
                f"{label(window, compression):<34}{frames:>13.0f}{payload:>9.1f}x{wire:>8.1f}x{p50:>9.1f}{p99:>9.1f}"
                f"{cpu:>8.2f}{cpu / base_cpu:>11.2f}"
            )
    window = args.window_ms
    deflate, plain = figures[label(window, "deflate")], figures[label(window, None)]
    added = [figures[label(window, c)][2] - figures[label(0, c)][2] for c in ("deflate", None)]
    checks = [
        (
            f"wire with deflate <= {TARGET_WIRE_DEFLATE:g}x the answer",
            deflate[0] <= TARGET_WIRE_DEFLATE,
            f"{deflate[0]:.2f}x",
        ),
        (f"wire without compression <= {TARGET_WIRE_PLAIN:g}x", plain[0] <= TARGET_WIRE_PLAIN, f"{plain[0]:.1f}x"),
        (
            f"coalescing adds <= {TARGET_ADDED_P99_MS:g} ms at p99",
            max(added) <= TARGET_ADDED_P99_MS,
            " / ".join(f"{a:.1f} ms" for a in added) + " (deflate / none)",
        ),
        (
            f"server CPU per answer <= {TARGET_CPU_RATIO:g}x forwarding every delta",
            max(deflate[3], plain[3]) <= TARGET_CPU_RATIO,
            f"{deflate[3]:.2f} / {plain[3]:.2f} (deflate / none)",
        ),
    ]
    for name, met, figure in checks:
        print(f"target: {name}: {'met' if met else 'NOT met'} ({figure})")
    above = [above_idle_ratio(results, servers_idle, window, c) for c in ("deflate", None)]
    print(
        f"informational: the idle server spends {1000 * servers_idle[window]:.1f} / {1000 * servers_idle[0]:.1f} ms "
        f"of CPU a second (window {window} / 0); the CPU ratio above that: {above[0]:.2f} / {above[1]:.2f} "
        "(deflate / none)"
    )


def above_idle_ratio(
    results: dict[str, list[RunResult]], idle: dict[int, float], window: int, compression: Compression
) -> float:
    """The CPU ratio of a case to window 0 once each server's idle spending over the run's time is taken off."""

    def above(at: int) -> float:
        return statistics.median(r.cpu_seconds - idle[at] * r.seconds for r in results[label(at, compression)])

    return above(window) / above(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="runs per case")
    parser.add_argument("--words", type=int, default=2000, help="words (deltas) in the echoed answer")
    parser.add_argument("--window-ms", type=int, default=100, help="the coalescing window of the measured case")
    parser.add_argument("--clients", type=int, default=1, help="connections of the account receiving each run")
    parser.add_argument("--delta-delay", type=float, default=0.01, help="the demo Hermes's delta pacing")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    with tempfile.TemporaryDirectory(prefix="pheby-bench-") as tmp:
        api_key = "bench-demo-key-0123456789abcdef"
        demo = DemoChild(api_key, Path(tmp) / "demo.log", delta_delay=args.delta_delay)
        servers: dict[int, Server] = {}
        try:
            ports: dict[int, int] = {}
            for window in (args.window_ms, 0):
                ports[window] = free_port()
                flags = {
                    "data_dir": str(Path(tmp) / f"window-{window}"),
                    "port": ports[window],
                    "secret": SECRET,
                    "hermes_url": demo.base_url,
                    "hermes_api_key": api_key,
                    "ws_delta_window_ms": window,
                }
                record = Path(tmp) / f"deltas-{window}.json"
                servers[window] = Server(ServerChild(flags, Path(tmp) / f"server-{window}.log", record), record)
            results = asyncio.run(bench(args, ports, servers))
            idle = {window: server.idle_cpu_rate for window, server in servers.items()}
        finally:
            for server in servers.values():
                server.child.stop()
            demo.stop()
    report(results, args, idle)


if __name__ == "__main__":
    main()

"""Benchmark what a long streamed answer costs a client, on the wire, and the server, in CPU.

Run: `.venv/bin/python bench/stream_bytes.py [--rounds N] [--words N] [--window-ms N] [--append-window-ms N]
[--clients N]`

Two servers (uvicorn from `build_uvicorn_config`, as `pheby serve` builds it) run in processes of their
own, the demo Hermes in a third, alike but for the delta windows: the defaults (`--window-ms`, 100, for
cumulative clients, growing with the draft; `--append-window-ms`, 0, for clients that asked for append
deltas: sent as they come, folded where a socket is behind) and 0 (every Hermes delta forwarded). One
WebSocket client (or `--clients`, all of the owner account, so all receive the run), cumulative, asking for
`delta_append` ("append": objects) or for it with `delta_packed` ("packed": continuations as
`["d", stream, offset, append]`), with permessage-deflate offered or not, sends `chat.send` with
`/demo say` of N words of seeded varied Markdown (`bench.varied_text`, 600 distinct words): the demo
streams it one word per delta, 10 ms apart. Cases alternate round by round.

- frames / payload: the `message.delta` frames the client got, and the payload bytes of every frame
  of the run (after decompression); wire: the bytes the server sent for the run, counted by a TCP
  proxy between client and server (after compression, WebSocket framing included); each as a
  multiple of the answer's size (the UTF-8 bytes of its final text).
- latency: for every Hermes delta, the time from its emission (the `timestamp` the demo puts on
  it, same clock) to the arrival of the first frame whose text is at least as long as the visible
  draft after that delta (the server child records each delta's timestamp, see
  `bench.support.install_delta_recorder`; one clock, one machine); deltas emitted before the
  server's reader got its first event are left out. "added" is the windowed case minus the
  every-delta case of the same form. An append client's text is the draft it rebuilds from `offset`
  and `append`.
- CPU: the server process's CPU time (user + system, all its threads, from /proc via psutil) over
  the run; the demo Hermes and the clients are other processes. As a ratio to the every-delta case of
  the same form and compression (an informational line gives append clients against cumulative ones
  at every delta). It includes reading the run's SSE stream from Hermes and what the server spends
  with nothing to do (pollers, uvicorn's tick) while the answer streams; each server is first
  watched idle for a few seconds, and that spending is printed.
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
from typing import Final, Literal

import psutil
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.support import DemoChild, ServerChild, free_port, read_recorded_deltas
from bench.varied_text import varied_text
from bench.ws_stream import SECRET, Compression, percentile
from pheby.files.media_tags import visible_draft

TIMEOUT: Final = 120.0
Form = Literal["cumulative", "append", "packed"]
FORMS: Final[tuple[Form, ...]] = ("cumulative", "append", "packed")
APPEND_FORMS: Final[tuple[Form, ...]] = ("append", "packed")
FEATURES: Final[dict[Form, list[str]]] = {
    "cumulative": [],
    "append": ["delta_append"],
    "packed": ["delta_append", "delta_packed"],
}
TARGET_CUMULATIVE_WIRE_DEFLATE: Final = 2.0
TARGET_CUMULATIVE_ADDED_P99_MS: Final = 120.0
TARGET_APPEND_WIRE_DEFLATE: Final = 2.5
TARGET_APPEND_WIRE_PLAIN: Final = 4.0
TARGET_APPEND_ADDED_P99_MS: Final = 3.0
TARGET_APPEND_CPU_RATIO: Final = 1.1
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
    async def open(cls, url: str, compression: Compression, form: Form) -> "Client":
        ws = await connect(url, max_size=None, compression=compression, open_timeout=TIMEOUT)
        hello: dict[str, object] = {"type": "hello", "request_id": "h", "secret": SECRET, "protocol_version": 1}
        if FEATURES[form]:
            hello["features"] = FEATURES[form]
        await ws.send(json.dumps(hello))
        ready = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
        if ready["type"] != "ready" or ready.get("features", []) != FEATURES[form]:
            raise RuntimeError(f"hello failed: {ready}")
        return cls(ws)

    async def _read(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for raw in self.ws:
                arrived = time.time()
                frame = json.loads(raw)
                if isinstance(frame, list):  # packed: ["d", stream, offset, append], of the one message streaming
                    frame = {"type": "message.delta", "offset": frame[2], "append": frame[3]}
                self.frames.append((arrived, len(raw), frame))
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
    arrivals = delta_arrivals(frames)
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


def delta_arrivals(frames: list[tuple[float, int, dict[str, object]]]) -> list[tuple[float, int]]:
    """When each `message.delta` arrived and how long the client's draft was then, in either form."""
    arrivals: list[tuple[float, int]] = []
    draft = ""
    for arrived, _, frame in frames:
        if frame["type"] != "message.delta":
            continue
        if "text" in frame:
            draft = str(frame["text"])
        else:
            offset = frame["offset"]
            assert isinstance(offset, int)
            draft = draft[:offset] + str(frame["append"])
        arrivals.append((arrived, len(draft)))
    return arrivals


async def bench(
    args: argparse.Namespace, ports: dict[int, int], servers: dict[int, Server]
) -> dict[str, list[RunResult]]:
    text = "/demo say " + varied_text(args.words, 0)
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
        forms = [form for form in FORMS if form in args.forms]
        cases = [(window, form, compression) for window in proxies for form in forms for compression in modes]
        warm = "/demo say " + varied_text(20, 1)
        for round_ in range(args.rounds + 1):
            for window, form, compression in cases:
                # Only this case's clients are open: every connection of the account gets the run's events.
                url = f"ws://127.0.0.1:{proxies[window].port}/ws"
                clients = [await Client.open(url, compression, form) for _ in range(args.clients)]
                try:
                    result = await one_run(clients, proxies[window], servers[window], warm if round_ == 0 else text)
                finally:
                    for client in clients:
                        await client.close()
                if round_ > 0:
                    results.setdefault(label(window, form, compression), []).append(result)
    finally:
        for proxy in proxies.values():
            await proxy.stop()
    return results


def label(window: int, form: Form, compression: Compression) -> str:
    return f"{form}, {'window' if window else 'every delta'}, {'deflate' if compression else 'no compression'}"


@dataclass(frozen=True)
class Figures:
    frames: float
    payload: float  # x the answer
    wire: float  # x the answer
    p50_ms: float
    p99_ms: float
    cpu: float  # seconds per answer


def figures_of(runs: list[RunResult]) -> Figures:
    latencies = [x for r in runs for x in r.latencies]
    return Figures(
        frames=statistics.median(r.delta_frames for r in runs),
        payload=statistics.median(r.payload_bytes / r.answer_bytes for r in runs),
        wire=statistics.median(r.wire_bytes / r.answer_bytes for r in runs),
        p50_ms=percentile(latencies, 50) * 1000,
        p99_ms=percentile(latencies, 99) * 1000,
        cpu=statistics.median(r.cpu_seconds for r in runs),
    )


def report(results: dict[str, list[RunResult]], args: argparse.Namespace, servers_idle: dict[int, float]) -> None:
    first = next(iter(results.values()))[0]
    print(
        f"/demo say of {args.words} words of varied text ({first.answer_bytes} bytes of answer), one word per "
        f"delta, {args.rounds} runs per case, {args.clients} client(s) receiving each; windows {args.window_ms} ms "
        f"(cumulative) and {args.append_window_ms} ms (append); sizes per client as multiples of the answer "
        "(median of the runs); CPU ratio: to every delta forwarded, same form and compression"
    )
    print(
        f"{'case':<42}{'frames':>8}{'payload':>9}{'wire':>8}{'p50 ms':>8}{'p99 ms':>8}{'added p99':>10}"
        f"{'CPU s':>7}{'CPU ratio':>10}"
    )
    window = args.window_ms or args.append_window_ms
    table: dict[str, Figures] = {name: figures_of(runs) for name, runs in results.items()}
    forms = [form for form in FORMS if label(0, form, "deflate") in table]
    for form in forms:
        for compression in ("deflate", None):
            base = table[label(0, form, compression)]
            for at in (window, 0):
                f = table[label(at, form, compression)]
                print(
                    f"{label(at, form, compression):<42}{f.frames:>8.0f}{f.payload:>8.2f}x{f.wire:>7.2f}x"
                    f"{f.p50_ms:>8.1f}{f.p99_ms:>8.1f}{f.p99_ms - base.p99_ms:>10.1f}"
                    f"{f.cpu:>7.2f}{f.cpu / base.cpu:>10.2f}"
                )

    def case(form: Form, compression: Compression) -> Figures:
        return table[label(window, form, compression)]

    def added(form: Form, compression: Compression) -> float:
        return case(form, compression).p99_ms - table[label(0, form, compression)].p99_ms

    def cpu_ratio(form: Form, compression: Compression) -> float:
        return case(form, compression).cpu / table[label(0, form, compression)].cpu

    checks: list[tuple[str, float, float, str]] = []
    for form in (f for f in APPEND_FORMS if f in forms):
        checks += [
            (
                f"{form}, deflate: CPU <= {TARGET_APPEND_CPU_RATIO:g}x every delta forwarded",
                cpu_ratio(form, "deflate"),
                TARGET_APPEND_CPU_RATIO,
                "x",
            ),
        ]
    if "packed" in forms:  # what Pheby Web asks for
        checks += [
            (
                f"packed, deflate: added p99 <= {TARGET_APPEND_ADDED_P99_MS:g} ms",
                added("packed", "deflate"),
                TARGET_APPEND_ADDED_P99_MS,
                "ms",
            ),
            (
                f"packed, deflate: wire <= {TARGET_APPEND_WIRE_DEFLATE:g}x the answer",
                case("packed", "deflate").wire,
                TARGET_APPEND_WIRE_DEFLATE,
                "x",
            ),
            # What a client without compression asks for: objects' keys and ids outweigh their text.
            ("packed, no compression: wire <= 4x the answer", case("packed", None).wire, TARGET_APPEND_WIRE_PLAIN, "x"),
        ]
    if "cumulative" in forms:
        checks += [
            (
                f"cumulative, deflate: wire <= {TARGET_CUMULATIVE_WIRE_DEFLATE:g}x the answer",
                case("cumulative", "deflate").wire,
                TARGET_CUMULATIVE_WIRE_DEFLATE,
                "x",
            ),
            (
                "cumulative, deflate: added p99 <= 120 ms",
                added("cumulative", "deflate"),
                TARGET_CUMULATIVE_ADDED_P99_MS,
                "ms",
            ),
        ]
    for name, figure, target, unit in checks:
        print(f"target: {name}: {'met' if figure <= target else 'NOT met'} ({figure:.2f} {unit})")
    if "append" in forms:
        print(
            f"informational: append objects: wire {case('append', 'deflate').wire:.2f}x the answer with deflate, "
            f"{case('append', None).wire:.2f}x without; added p99 {added('append', 'deflate'):.2f} ms with deflate"
        )
    if len(forms) == len(FORMS):
        every = table[label(0, "cumulative", "deflate")].cpu
        print(
            "informational: append at its window against cumulative at every delta (deflate): "
            f"CPU {case('append', 'deflate').cpu / every:.2f}x"
        )
    print(
        f"informational: the idle server spends {1000 * servers_idle[window]:.1f} / {1000 * servers_idle[0]:.1f} ms "
        "of CPU a second (windowed / every delta)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="runs per case")
    parser.add_argument("--words", type=int, default=2000, help="words (deltas) in the echoed answer")
    parser.add_argument("--window-ms", type=int, default=100, help="the window of cumulative clients")
    parser.add_argument("--append-window-ms", type=int, default=0, help="the window of append clients (0: none)")
    parser.add_argument("--forms", nargs="+", choices=FORMS, default=list(FORMS), help="the clients' delta forms")
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
                flags = demo.server_flags(
                    Path(tmp) / f"window-{window}",
                    ports[window],
                    SECRET,
                    ws_delta_window_ms=window,
                    ws_append_window_ms=args.append_window_ms if window else 0,
                )
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

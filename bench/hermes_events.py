"""Benchmark how fast `hermes_client` turns a Hermes run stream into typed events.

Run: `.venv/bin/python bench/hermes_events.py [--events N] [--repeats N]`

A tiny HTTP server on a loopback port (a thread of this process that only `sendall`s pre-built bytes)
serves one pre-built 0.19.0-style run stream at `/v1/runs/<id>/events`: mostly `message.delta`, a
`tool.started`/`tool.completed` pair and a `reasoning.available` after every text block, a `: keepalive`
comment now and then, and `run.completed` then `: stream closed` at the end. It is served twice, with
the same SSE bytes in two HTTP framings: one chunk per event (how aiohttp, and so Hermes, writes a
stream) and 64 KiB chunks (the least HTTP work per byte, so the parsing cost shows most).

The client path is `HermesClient.run_events(run_id)`, counting the events it yields. The baseline reads
the same response with plain httpx `aiter_lines()`, counting the `data:` lines. Both run in the same
process against the same server, in adjacent pairs (alternating which goes first); the ratio printed is
the median over pairs of (line-reading time / run_events time), which a load change on the shared
machine shifts less than a ratio of two separately taken best times.
"""

import argparse
import asyncio
import contextlib
import json
import random
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Final

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from hermes_client import HermesClient

API_KEY: Final = "bench-hermes-key"
TARGET_RATIO: Final = 0.5
BIG_CHUNK: Final = 64 * 1024
REQUEST_HEAD_LIMIT: Final = 64 * 1024
WORDS: Final = (
    "the", "agent", "streams", "its", "answer", "token", "by", "token;", "a", "café", "résumé", "with",
    '"quotes"', "and", "back\\slashes", "in", "Markdown:", "**bold**", "`code`", "—", "and", "numbers", "42.",
)  # fmt: skip


def build_stream(run_id: str, events: int, seed: int = 7) -> tuple[list[bytes], int]:
    """The SSE frames of one run (events and comments, in order) and how many `data:` events there are.

    Text blocks of 40-120 word deltas, each followed by `reasoning.available`; between blocks a tool
    call; a keepalive comment every ~2,000 frames; the last event is `run.completed`.
    """
    rng = random.Random(seed)
    now = time.time()
    frames: list[bytes] = []
    count = 0
    block: list[str] = []
    after_tool = False

    def emit(name: str, **fields: Any) -> None:
        nonlocal count
        payload = {"event": name, "run_id": run_id, "timestamp": now + count * 0.0005, **fields}
        frames.append(b"data: " + json.dumps(payload).encode() + b"\n\n")  # as 0.19.0 writes it
        count += 1

    def end_block() -> None:
        emit("reasoning.available", text="".join(block)[:500])
        block.clear()

    while count < events - 1:
        if rng.random() < 0.0005:
            frames.append(b": keepalive\n\n")
        if block and rng.random() < 1 / 80 and count < events - 6:
            end_block()
            emit("tool.started", tool="terminal", preview=f"ls -la /tmp/work-{count}")
            emit("tool.completed", tool="terminal", duration=round(rng.uniform(0.01, 2.0), 3), error=False)
            after_tool = True
            continue
        word = rng.choice(WORDS) + ("\n" if rng.random() < 0.05 else " ")
        if after_tool:
            word, after_tool = "\n\n" + word, False
        block.append(word)
        emit("message.delta", delta=word)
    usage = {"input_tokens": 1200, "output_tokens": count, "total_tokens": 1200 + count}
    emit("run.completed", output="".join(block), usage=usage)
    frames.append(b": stream closed\n\n")
    return frames, count


def http_response(frames: list[bytes], per_event: bool) -> bytes:
    """A complete chunked `text/event-stream` response: one chunk per frame, or 64 KiB chunks."""
    if per_event:
        pieces = frames
    else:
        body = b"".join(frames)
        pieces = [body[i : i + BIG_CHUNK] for i in range(0, len(body), BIG_CHUNK)]
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    chunks = [b"%x\r\n%b\r\n" % (len(piece), piece) for piece in pieces]
    return head + b"".join(chunks) + b"0\r\n\r\n"


class StreamServer:
    """Serves pre-built responses by path on 127.0.0.1, one connection at a time, in a thread."""

    def __init__(self, responses: dict[str, bytes]) -> None:
        self._responses = responses
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self._sock.settimeout(0.2)
        self._thread = threading.Thread(target=self._serve, name="sse-server", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            # OSError: the client left early (run_events stops reading at run.completed).
            with conn, contextlib.suppress(OSError):
                conn.settimeout(30)
                self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head and len(head) < REQUEST_HEAD_LIMIT:
            data = conn.recv(4096)
            if not data:
                return
            head += data
        parts = head.split(b"\r\n", 1)[0].split()
        path = parts[1].decode() if len(parts) > 1 else ""
        response = self._responses.get(path)
        if response is None:
            body = b'{"error": {"message": "Run not found", "type": "invalid_request_error"}}'
            response = b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
            response += b"Content-Length: %d\r\nConnection: close\r\n\r\n%b" % (len(body), body)
        conn.sendall(response)
        conn.shutdown(socket.SHUT_WR)


async def client_path(base_url: str, run_id: str) -> tuple[float, int]:
    """Seconds to stream the whole run through `HermesClient.run_events`, and the events it yielded."""
    async with HermesClient(base_url, API_KEY) as client:
        count = 0
        start = time.perf_counter()
        async for _event in client.run_events(run_id):
            count += 1
        return time.perf_counter() - start, count


async def line_baseline(base_url: str, run_id: str) -> tuple[float, int]:
    """Seconds to read the same response line by line with httpx, and the `data:` lines it saw."""
    headers = {"Authorization": f"Bearer {API_KEY}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as http:
        count = 0
        start = time.perf_counter()
        async with http.stream("GET", f"/v1/runs/{run_id}/events") as response:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    count += 1
        return time.perf_counter() - start, count


async def measure(base_url: str, run_id: str, expected: int, repeats: int) -> tuple[list[float], list[float]]:
    """Alternate the two paths `repeats` times (after one warm-up each); their times in seconds."""
    await client_path(base_url, run_id)
    await line_baseline(base_url, run_id)
    client_times: list[float] = []
    baseline_times: list[float] = []
    for round_ in range(repeats):
        order = (client_path, line_baseline) if round_ % 2 == 0 else (line_baseline, client_path)
        for path in order:
            seconds, count = await path(base_url, run_id)
            if count != expected:
                raise SystemExit(f"{path.__name__} saw {count} events, expected {expected}")
            (client_times if path is client_path else baseline_times).append(seconds)
    return client_times, baseline_times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000, help="data events in the stream")
    parser.add_argument("--repeats", type=int, default=5, help="timed pairs per framing (x3 for 64 KiB chunks)")
    args = parser.parse_args()

    framings = {"one chunk per event": "run_per_event", "64 KiB chunks": "run_big_chunks"}
    # The 64 KiB framing streams ~10x faster, so it gets more (and still cheap) pairs.
    repeats = {"one chunk per event": args.repeats, "64 KiB chunks": args.repeats * 3}
    responses: dict[str, bytes] = {}
    expected = 0
    size = 0
    for label, run_id in framings.items():
        frames, expected = build_stream(run_id, args.events)
        size = sum(map(len, frames))
        responses[f"/v1/runs/{run_id}/events"] = http_response(frames, per_event=label == "one chunk per event")

    server = StreamServer(responses)
    server.start()
    try:
        results = {
            label: asyncio.run(measure(server.base_url, run_id, expected, repeats[label]))
            for label, run_id in framings.items()
        }
    finally:
        server.stop()

    counts = ", ".join(f"{n} pairs with {label}" for label, n in repeats.items())
    print(f"{expected:,} SSE events ({size / 1e6:.1f} MB) over loopback; {counts}")
    print(f"{'framing':<22}{'path':<26}{'best events/s':>15}{'median events/s':>17}")
    met = True
    for label, (client_times, baseline_times) in results.items():
        for name, times in (("httpx aiter_lines", baseline_times), ("HermesClient.run_events", client_times)):
            best, median = expected / min(times), expected / statistics.median(times)
            print(f"{label:<22}{name:<26}{best:>15,.0f}{median:>17,.0f}")
        pairs = sorted(b / c for c, b in zip(client_times, baseline_times, strict=True))
        ratio = statistics.median(pairs)
        met = met and ratio >= TARGET_RATIO
        spread = f"(pairs {pairs[0]:.2f}-{pairs[-1]:.2f})"
        print(f"{label:<22}{'ratio run_events / lines':<26}{ratio:>15.2f}  median of pairs {spread}")
    verdict = "met" if met else "NOT met"
    print(f"target: run_events >= {TARGET_RATIO} x the line-reading rate (median of pairs, both framings): {verdict}")


if __name__ == "__main__":
    main()

"""Benchmark the server under abuse: its memory and its latency to everyone else, against itself idle.

Run: `.venv/bin/python bench/abuse.py [--slow-replies N] [--sockets N] [--logins N]`

Each case starts a fresh server in a subprocess (the options of `build_uvicorn_config`, as `pheby
serve` uses them; RLIMIT_NOFILE raised to the hard limit, here and in the child) on the demo
Hermes, which runs in this process. The server's RSS is read once it is idle (after a warm-up);
during the case a thread samples it (plus the kernel's VmHWM, see `bench/upload.py`'s `PeakRss`),
and the growth printed is peak - idle.

- slow reader: one authenticated client asks for N replies of about 1 MiB each and reads none of
  them. A `ping` with a long `request_id` no longer makes one (request_id is at most 128
  characters), so the legitimate way is used: `conversation.open` of a conversation whose history
  is about 1 MiB (8 turns of 63,000-character messages and the demo's echo of each). The client
  stops reading (the `websockets` client buffers at most 16 messages, then stops reading the
  socket), so the replies pile up on the server; the case ends when the server closes the socket
  (its send queue bounded) or after the replies had time to be made.
- sockets before hello: N sockets from 125 loopback addresses (127.0.0.x, so each address holds
  the 8 sockets it may) that never say hello; measured twice: idle sockets, and sockets that each
  sent just under 64 KiB of a frame and stalled (the most one socket may buffer before hello; all
  of them together may hold `PHEBY_WS_PRE_HELLO_BYTES`, 16 MiB, and the socket that would pass it
  is refused, so "still open" counts those the server kept).
- login flood: N clients, each from its own loopback address, post failing logins (random
  usernames) as fast as they are answered, while a client of the owner times `GET /api/me`
  (bearer); its p50 during the flood over its p50 idle (same server, just before) is the ratio.
"""

import argparse
import asyncio
import contextlib
import json
import logging
import secrets
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Final

import httpx
import psutil
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.support import free_port, raise_nofile_limit, serve_child, stop_process, wait_until_up
from bench.upload import PeakRss
from demo_hermes.server import DemoHermesServer

SECRET: Final = "bench-owner-secret-0123456789abcdef"
MiB: Final = 1024 * 1024
TIMEOUT: Final = 120.0
TARGET_SLOW_READER_MIB: Final = 32.0
TARGET_BEFORE_HELLO_MIB: Final = 64.0
TARGET_FLOOD_MIB: Final = 64.0
TARGET_FLOOD_P50_RATIO: Final = 10.0
ADDRESSES: Final = 125
PRE_HELLO_PARTIAL: Final = 64 * 1024 - 1024  # a frame header announcing 64 KiB, then this much of it
HISTORY_TURNS: Final = 8
TURN_CHARS: Final = 63_000


class Server:
    """The server in a child process, on a fresh data dir, against the demo Hermes."""

    def __init__(self, demo: DemoHermesServer, data_dir: Path, **flags: Any) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}/ws"
        values = {
            "data_dir": str(data_dir),
            "port": self.port,
            "secret": SECRET,
            "hermes_url": demo.base_url,
            "hermes_api_key": demo.api_key,
            "ws_hello_timeout": 120.0,
            **flags,
        }
        data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = data_dir / "server.log"
        with self.log_path.open("wb") as log:
            command = [sys.executable, str(Path(__file__).resolve()), "--serve-child", json.dumps(values)]
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until_up(self.process, self.base_url, TIMEOUT, self.log_tail)
        except Exception:
            stop_process(self.process)
            raise
        self.psutil = psutil.Process(self.process.pid)

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def rss(self) -> int:
        return int(self.psutil.memory_info().rss)

    def stop(self) -> None:
        stop_process(self.process)


async def hello(ws: ClientConnection) -> None:
    await ws.send(json.dumps({"type": "hello", "secret": SECRET, "protocol_version": 1}))
    first = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
    if first["type"] != "ready":
        raise RuntimeError(f"hello was answered with {first}")


async def request(ws: ClientConnection, type_: str, reply: str, **fields: Any) -> dict[str, Any]:
    """Send and read frames until the reply (or an error) of this request_id."""
    request_id = secrets.token_hex(4)
    await ws.send(json.dumps({"type": type_, "request_id": request_id, **fields}))
    while True:
        frame: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
        if frame.get("request_id") == request_id and frame["type"] in (reply, "error"):
            if frame["type"] == "error":
                raise RuntimeError(f"{type_}: {frame}")
            return frame


async def warm_up(server: Server) -> None:
    """A few connections and requests, so the idle figure includes what any first use allocates."""
    async with httpx.AsyncClient(base_url=server.base_url, timeout=TIMEOUT) as http:
        for _ in range(5):
            await http.get("/api/me", headers={"Authorization": f"Bearer {SECRET}"})
            await http.post("/api/auth/login", json={"username": "warm", "password": "up"})
    for _ in range(3):
        async with connect(server.ws_url, max_size=None) as ws:
            await hello(ws)
            await request(ws, "ping", "pong")
    await asyncio.sleep(1.0)


# --- one client that stops reading -----------------------------------------------------------------


async def long_history(server: Server) -> tuple[str, int]:
    """A conversation whose `conversation.open` reply is about 1 MiB; returns its id and that size."""
    async with connect(server.ws_url, max_size=None) as ws:
        await hello(ws)
        conversation_id = (await request(ws, "conversation.create", "conversation.created", name="long"))[
            "conversation_id"
        ]
        for turn in range(HISTORY_TURNS):
            text = chr(ord("a") + turn) * TURN_CHARS
            accepted = await request(ws, "chat.send", "run.accepted", conversation_id=conversation_id, text=text)
            while True:
                frame = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
                if frame["type"] == "run.finished" and frame.get("run_id") == accepted["run_id"]:
                    break
        opened = await request(ws, "conversation.open", "conversation.history", conversation_id=conversation_id)
        return conversation_id, len(json.dumps(opened))


async def slow_reader(server: Server, replies: int) -> dict[str, Any]:
    conversation_id, reply_bytes = await long_history(server)
    await asyncio.sleep(1.0)
    with PeakRss(server.process.pid) as peak:
        # No compression: the worst case is a client whose replies can't shrink on the wire.
        ws = await connect(server.ws_url, max_size=None, max_queue=16, compression=None)
        await hello(ws)
        started = time.monotonic()
        frame = json.dumps({"type": "conversation.open", "conversation_id": conversation_id})
        sent = 0
        with contextlib.suppress(ConnectionClosed):
            for _ in range(replies):
                await ws.send(frame)  # and never read: the client's queue fills, then it stops reading
                sent += 1
        # The replies take a while to be made (each reads the history from Hermes): wait until the
        # RSS has stopped growing for a few seconds (the client, not reading, can't see a close).
        last, steady_since = server.rss(), time.monotonic()
        while time.monotonic() - steady_since < 5 and time.monotonic() - started < TIMEOUT:
            await asyncio.sleep(0.5)
            rss = server.rss()
            if rss > last + MiB:
                last, steady_since = rss, time.monotonic()
        ws.transport.abort()
    closed = "closing slow WebSocket connection" in server.log_path.read_text(errors="replace")  # its warning
    return {"growth": peak.growth, "idle": peak.start, "reply_bytes": reply_bytes, "sent": sent, "closed": closed}


# --- sockets that never say hello ---------------------------------------------------------------


async def open_waiting(url: str, count: int, partial: bool) -> list[ClientConnection]:
    gate = asyncio.Semaphore(50)

    async def one(n: int) -> ClientConnection:
        async with gate:
            address = f"127.0.0.{n % ADDRESSES + 1}"
            ws = await connect(url, max_size=None, open_timeout=TIMEOUT, local_addr=(address, 0))
            if partial:  # a masked text frame announcing 64 KiB, of which a little less is sent
                header = bytes([0x81, 0x80 | 127]) + struct.pack("!Q", 64 * 1024) + b"\0\0\0\0"
                ws.transport.write(header + b"x" * PRE_HELLO_PARTIAL)
            return ws

    results = await asyncio.gather(*(one(n) for n in range(count)), return_exceptions=True)
    sockets = [r for r in results if isinstance(r, ClientConnection)]
    failures = [r for r in results if not isinstance(r, ClientConnection)]
    if failures:
        for ws in sockets:
            ws.transport.abort()
        raise RuntimeError(f"{len(failures)} of {count} sockets failed, e.g. {failures[0]!r}")
    return sockets


async def before_hello(server: Server, count: int, partial: bool) -> dict[str, Any]:
    with PeakRss(server.process.pid) as peak:
        sockets = await open_waiting(server.ws_url, count, partial)
        await asyncio.sleep(3.0)
        still_open = sum(ws.close_code is None for ws in sockets)
    for ws in sockets:
        ws.transport.abort()
    return {"growth": peak.growth, "idle": peak.start, "open": still_open}


# --- a login flood ---------------------------------------------------------------------------------


async def me_latencies(http: httpx.AsyncClient, count: int) -> list[float]:
    times: list[float] = []
    for _ in range(count):
        started = time.perf_counter()
        response = await http.get("/api/me", headers={"Authorization": f"Bearer {SECRET}"})
        times.append(time.perf_counter() - started)
        if response.status_code != 200:
            raise RuntimeError(f"/api/me answered {response.status_code}")
        await asyncio.sleep(0.01)
    return times


async def login_flood(server: Server, clients: int, samples: int) -> dict[str, Any]:
    statuses: dict[int, int] = {}
    async with httpx.AsyncClient(base_url=server.base_url, timeout=TIMEOUT) as me:
        idle = await me_latencies(me, samples)
        stop = asyncio.Event()

        async def attacker(n: int) -> None:
            transport = httpx.AsyncHTTPTransport(local_address=f"127.0.{n // 250 + 2}.{n % 250 + 1}")
            async with httpx.AsyncClient(base_url=server.base_url, timeout=TIMEOUT, transport=transport) as http:
                while not stop.is_set():
                    body = {"username": secrets.token_hex(8), "password": "wrong"}
                    try:
                        status = (await http.post("/api/auth/login", json=body)).status_code
                    except httpx.TransportError:
                        status = 0
                    statuses[status] = statuses.get(status, 0) + 1

        with PeakRss(server.process.pid) as peak:
            attackers = [asyncio.create_task(attacker(n)) for n in range(clients)]
            await asyncio.sleep(2.0)  # the flood is on
            during = await me_latencies(me, samples)
            stop.set()
            await asyncio.gather(*attackers)
    return {
        "growth": peak.growth,
        "idle": peak.start,
        "idle_p50": statistics.median(idle),
        "flood_p50": statistics.median(during),
        "statuses": statuses,
    }


# --- the report ------------------------------------------------------------------------------------


def verdict(value: float, target: float) -> str:
    return "met" if value <= target else "NOT met"


def run_case(
    demo: DemoHermesServer, tmp: Path, name: str, case: Callable[[Server], Coroutine[Any, Any, dict[str, Any]]]
) -> dict[str, Any]:
    server = Server(demo, tmp / name)
    try:
        asyncio.run(warm_up(server))
        return asyncio.run(case(server))
    except Exception:
        print(server.log_tail(), file=sys.stderr)
        raise
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow-replies", type=int, default=300, help="replies of ~1 MiB owed to the slow reader")
    parser.add_argument("--sockets", type=int, default=1000, help="sockets that never say hello")
    parser.add_argument("--logins", type=int, default=200, help="concurrent failing-login clients")
    parser.add_argument("--samples", type=int, default=100, help="GET /api/me timings, idle and during the flood")
    parser.add_argument("--serve-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_child:
        serve_child(args.serve_child)
        return
    raise_nofile_limit()
    logging.disable(logging.INFO)
    with tempfile.TemporaryDirectory(prefix="pheby-bench-") as tmp, DemoHermesServer(delta_delay=0.0) as demo:
        root = Path(tmp)
        slow = run_case(demo, root, "slow", lambda s: slow_reader(s, args.slow_replies))
        idle_sockets = run_case(demo, root, "idle", lambda s: before_hello(s, args.sockets, partial=False))
        partial = run_case(demo, root, "partial", lambda s: before_hello(s, args.sockets, partial=True))
        flood = run_case(demo, root, "flood", lambda s: login_flood(s, args.logins, args.samples))

    print("server RSS growth over the idle server (server in a subprocess, a fresh one per case):")
    growth = slow["growth"] / MiB
    print(
        f"  slow reader, {slow['sent']} conversation.open owed ({slow['reply_bytes'] / MiB:.2f} MiB each), "
        f"idle {slow['idle'] / MiB:.1f} MiB: +{growth:.1f} MiB; closed by the server as too slow: "
        f"{'yes' if slow['closed'] else 'no'}  [target <= {TARGET_SLOW_READER_MIB:g} MiB: "
        f"{verdict(growth, TARGET_SLOW_READER_MIB)}]"
    )
    for label, result in (("idle", idle_sockets), (f"each with {PRE_HELLO_PARTIAL // 1024} KiB of a frame", partial)):
        growth = result["growth"] / MiB
        print(
            f"  {args.sockets} sockets before hello from {ADDRESSES} addresses, {label}, "
            f"idle {result['idle'] / MiB:.1f} MiB: +{growth:.1f} MiB ({result['open']} still open)  "
            f"[target <= {TARGET_BEFORE_HELLO_MIB:g} MiB: {verdict(growth, TARGET_BEFORE_HELLO_MIB)}]"
        )
    growth = flood["growth"] / MiB
    ratio = flood["flood_p50"] / flood["idle_p50"]
    print(
        f"  {args.logins} clients flooding failing logins, idle {flood['idle'] / MiB:.1f} MiB: +{growth:.1f} MiB  "
        f"[target <= {TARGET_FLOOD_MIB:g} MiB: {verdict(growth, TARGET_FLOOD_MIB)}]"
    )
    print(f"    login answers during the flood, by status: {dict(sorted(flood['statuses'].items()))}")
    print(
        f"  GET /api/me p50 idle {flood['idle_p50'] * 1000:.2f} ms, "
        f"during the flood {flood['flood_p50'] * 1000:.2f} ms: ratio {ratio:.1f}  "
        f"[target <= {TARGET_FLOOD_P50_RATIO:g}: {verdict(ratio, TARGET_FLOOD_P50_RATIO)}]"
    )


if __name__ == "__main__":
    main()

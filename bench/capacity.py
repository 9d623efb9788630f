"""Benchmark the capacity of one server process: idle authenticated sockets, and concurrent streaming runs.

Run: `.venv/bin/python bench/capacity.py [--quick] [--only idle|streams] [--idle-steps 1000,2500,...]
[--stream-steps 10,25,...] [--with-idle N] [--no-pin] [--no-compression]` (`--help` lists the rest)

Everything runs on loopback, each part in a process of its own: the server (uvicorn from
`build_uvicorn_config`, as `pheby serve` builds it), the demo Hermes (one or more), and the clients
(asyncio + websockets, in several client processes, each told what to do over JSON lines on its
stdin and answering on its stdout). With two or more CPUs the server is pinned to the first and the
bench, the demo Hermes and the clients to the others (`--no-pin` leaves the scheduler free), so the
server has a core of its own and no more. The server's CPU (user + system, all its threads) and RSS
are read with psutil, and how long its threads waited for a CPU from /proc/<pid>/task/*/schedstat
("waited": other load on its core). Every child is stopped by PID; each also ends itself after 30
minutes. Clients offer permessage-deflate, as browsers do (`--no-compression`: they don't).

Idle sockets. One server, a fresh data dir with enough accounts made in it beforehand (an account
holds at most `MAX_CONNECTIONS_PER_ACCOUNT` connections: 30 sockets each here), one API token each;
`ws_max_connections` is raised above the largest step. `--idle-clients` processes open sockets from
loopback addresses of their own (127.0.<20+k>.1-250), at most 4 at a time per address (the server
lets an address hold 8 sockets that have not said hello) and 16 at a time per process; each socket
says `hello`, waits for `ready`, and then stays idle (no client pings; the server's own WebSocket
pings, `WS_PING_SECONDS` after a socket opened and then as often, are answered by the client library).
At each step (sockets in all):
- RSS: the server's, 2 s after the step's last `ready`, and again once every socket has had its
  first keepalive ping (`WS_PING_SECONDS` + 2 s later; not with `--quick`): a ping can allocate too.
  "KiB/socket" is (RSS - RSS before the first socket) / sockets;
- the step's hellos: `hello` sent -> `ready` received, for each socket the step opened (p50 / p99),
  with up to 16 x `--idle-clients` handshakes in flight; hellos/s and the server's CPU per hello over
  the step's opening;
- a probe: a fresh connection from 127.0.0.1 (an account of its own) says hello, gets `ready` and
  closes, one at a time, `--probes` times once the step's sockets are open: p50 / p99 of hello -> ready;
- idle CPU: the server's CPU with all of them open, over one keepalive period (3 s with `--quick`).
Target: 10,000 idle sockets in at most 512 MiB of server RSS (all of it, not the growth; the larger
of the two readings).

Concurrent streams. A fresh server, its runs' deltas recorded (see below), the demo Hermes in
`--gateways` processes (the accounts' own gateway URLs alternate between them; each demo keeps its
default `max_concurrent_runs=0`, no limit, where a real Hermes gateway takes 10 concurrent runs),
pacing `--delta-delay` (50 ms, `/demo slow`'s pacing) between one-word deltas. At each step,
N runs over N / `--runs-per-account` accounts, one socket per account (so each run's events go to
one socket), each run in a conversation of its own: the conversations are made first, then the
`chat.send`s are spread over N x 5 ms and every run streams a plain message of about `--seconds` of
deltas ("You said: <tag> <words>"). The server's delta window is the default, 100 ms; `--packed` clients
ask for packed append deltas, as Pheby Web does (their window: `--append-window-ms`, 0 by default). With
`--with-idle N`, N idle authenticated sockets are opened first and held through the steps.
- Latency of a delta: from its emission (the `timestamp` the demo Hermes puts on it; one machine,
  one clock) to the arrival at the client of the first frame of its conversation (`message.delta`,
  or `message.complete`) whose text is at least as long as the visible draft after that delta. The
  server child records each Hermes delta's timestamp and when its run reader got it (it wraps
  `HermesClient.run_event_batches`, writing one file per run when its stream ends, as
  `bench.support.install_delta_recorder` does for one run at a time), and the text is replayed
  through `pheby.files.media_tags.visible_draft` as the server does. Coalescing holds a delta up to
  one window (a run's first text goes out at once), so "p99 - window" (the latency's p99 minus 100
  ms) is what load adds beyond coalescing. Only deltas of the steady state count: emitted after
  every run's reader had its first delta and before the first run's last delta (all N streaming).
- The latency split at the server's run reader: emission -> reader (it includes the reader's pause
  while a window is open, `pheby.runs.reader.pause_while_held`, so up to a window, and a demo
  Hermes late to write what it stamped) and reader -> client (held in the window, then sent).
- deltas/s a run: below the demo's pace (20 at 50 ms) the demo Hermes fell behind.
- ping: a quiet socket (the owner's, no runs) sends `ping` every 100 ms; p99 of the round trip is
  how long the server's event loop can be away.
- CPU: the server's over the steady state as % of one core, how long its threads waited for a CPU
  (over 10%: "disturbed", other load shared its core), and the same for the demo Hermes and client
  processes (summed): when they wait over 25% the load generator is short of CPU and the latency is
  an upper bound of the server's.
Budget: the latency's p99 within one window plus 50 ms (150 ms); the largest step that, with every
smaller one, kept it is reported. Target: at least 200 concurrent runs within that budget, the
server on one core.
"""

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgspec
import psutil
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.support import (
    DemoChild,
    RecordedDelta,
    free_port,
    raise_nofile_limit,
    record_run_deltas,
    serve_child,
    stop_process,
    wait_until_up,
    write_atomically,
)
from bench.ws_stream import percentile
from pheby.db import SqliteDatabase
from pheby.files.media_tags import visible_draft
from pheby.protocol.hub import MAX_CONNECTIONS_PER_ACCOUNT
from pheby.server import WS_PING_SECONDS
from pheby.store.accounts import Accounts, HermesAccountSettings

SCRIPT: Final = str(Path(__file__).resolve())
SECRET: Final = "bench-owner-secret-0123456789abcdef"
API_KEY: Final = "bench-demo-key-0123456789abcdef"
MiB: Final = 1024 * 1024
TIMEOUT: Final = 60.0
CHILD_LIFETIME: Final = 1800  # seconds: a child whose bench vanished ends itself (SIGALRM)
SOCKETS_PER_ACCOUNT: Final = MAX_CONNECTIONS_PER_ACCOUNT - 2
ADDRESSES_PER_CLIENT: Final = 250
PER_ADDRESS_IN_FLIGHT: Final = 4  # the server lets an address hold 8 sockets before hello
IN_FLIGHT_PER_CLIENT: Final = 16
MAX_COMMANDS: Final = 1000  # a client child's command loop
RAMP_PER_RUN: Final = 0.005  # seconds between two chat.send of a step
TARGET_IDLE_SOCKETS: Final = 10_000
TARGET_IDLE_MIB: Final = 512.0
TARGET_STREAMS: Final = 200
BUDGET_EXTRA_MS: Final = 50.0
DISTURBED_WAIT: Final = 0.10  # the server waited for a CPU this share of the time: other load disturbed it
SATURATED_WAIT: Final = 0.25  # the demo Hermes or the clients waited this share: the load generator is short of CPU
TAG: Final = re.compile(r"cap\d+x\d+")
Cpus = tuple[set[int] | None, set[int] | None]  # the server's, everything else's (None: not pinned)
WORDS: Final = (
    "streaming", "tokens", "reach", "the", "phone", "through", "a", "WebSocket", "while", "Hermes", "keeps",
    "thinking;", "each", "delta", "carries", "whole", "draft", "so", "far,", "and", "clients", "render", "it.",
)  # fmt: skip


PACKED_FEATURES: Final = ["delta_append", "delta_packed"]  # what Pheby Web asks for


def hello_frame(secret: str, features: Sequence[str] = ()) -> str:
    hello: dict[str, Any] = {"type": "hello", "request_id": "hello", "secret": secret, "protocol_version": 1}
    if features:
        hello["features"] = list(features)
    return json.dumps(hello)


def loopback_addresses(block: int) -> list[str]:
    return [f"127.0.{block}.{host}" for host in range(1, ADDRESSES_PER_CLIENT + 1)]


def ms(values: Sequence[float], q: float) -> float:
    return percentile(values, q) * 1000 if values else math.nan


# --- the server child: its runs' deltas recorded, one file per run ------------------------------------


def install_run_recorder(directory: Path) -> None:
    """Record each run's text deltas (`bench.support.record_run_deltas`) to `directory/<hermes run id>.json`
    as `[[delta, timestamp, received], ...]` when its stream ends."""
    record_run_deltas(lambda run_id, deltas: write_atomically(directory / f"{run_id}.json", json.dumps(deltas)))


def serve_recording_child(flags_json: str, record_dir: str, cpus: str) -> None:
    signal.alarm(CHILD_LIFETIME)
    if cpus:
        os.sched_setaffinity(0, {int(cpu) for cpu in cpus.split(",")})
    logging.disable(logging.INFO)
    if record_dir:
        install_run_recorder(Path(record_dir))
    serve_child(flags_json)


class ProcessCpu:
    """One process's CPU seconds (user + system, all its threads), and the seconds its threads were
    ready to run but waited for a CPU (Linux's /proc/<pid>/task/*/schedstat); 0 once it is gone."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.process = psutil.Process(pid)

    def cpu(self) -> float:
        with contextlib.suppress(psutil.Error):
            times = self.process.cpu_times()
            return float(times.user + times.system)
        return 0.0

    def waited(self) -> float:
        total = 0
        for path in Path(f"/proc/{self.pid}/task").glob("*/schedstat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int(path.read_text().split()[1])
        return total / 1e9

    def main_thread(self) -> tuple[float, float]:
        """The main thread's (the event loop's) seconds on a CPU, and waiting for one."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            on_cpu, waiting = Path(f"/proc/{self.pid}/task/{self.pid}/schedstat").read_text().split()[:2]
            return int(on_cpu) / 1e9, int(waiting) / 1e9
        return 0.0, 0.0


class Server:
    """The server in a child process (on `cpus`, if given), with its runs' deltas recorded to `record_dir`."""

    def __init__(self, flags: dict[str, Any], log_path: Path, record_dir: Path | None, cpus: set[int] | None) -> None:
        self.port = int(flags["port"])
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}/ws"
        self.log_path = log_path
        arguments = [json.dumps(flags), str(record_dir or ""), ",".join(map(str, sorted(cpus or ())))]
        with log_path.open("wb") as log:
            command = [sys.executable, SCRIPT, "--serve-child", *arguments]
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until_up(self.process, self.base_url, TIMEOUT, self.log_tail)
        except Exception:
            self.stop()
            raise
        self.usage = ProcessCpu(self.process.pid)

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-4000:]
        return ""

    def rss(self) -> int:
        return int(self.usage.process.memory_info().rss)

    def stop(self) -> None:
        stop_process(self.process)


async def make_accounts(data_dir: Path, count: int, gateways: Sequence[str] = ()) -> list[str]:
    """`count` accounts in the data dir's database, each with an API token (returned, in order); with
    `gateways`, account i's own Hermes is gateways[i % len(gateways)]."""
    data_dir.mkdir(parents=True, exist_ok=True)
    db = SqliteDatabase(data_dir / "pheby.sqlite3")
    await db.open()
    try:
        store = Accounts(db)
        tokens = []
        for index in range(count):
            name = f"cap-{index}"
            account = await store.create(name)
            if gateways:
                gateway = HermesAccountSettings(url=gateways[index % len(gateways)], api_key=API_KEY)
                await store.set_hermes(name, gateway)
            tokens.append((await store.issue_token(account.id, "api", None)).token)
        return tokens
    finally:
        await db.close()


# --- client children: JSON lines in, JSON lines out ----------------------------------------------------


class ClientChild:
    """A client child (`--idle-client` / `--stream-client`), told what to do on its stdin, answering
    one JSON line per command on its stdout; its stderr goes to `log_path`. Stopped by PID."""

    def __init__(self, mode: str, config: dict[str, Any], log_path: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, SCRIPT, mode, json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        self.usage = ProcessCpu(self.process.pid)

    def send(self, command: dict[str, Any]) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(json.dumps(command).encode() + b"\n")
        stdin.flush()

    async def reply(self, timeout: float) -> dict[str, Any]:
        stdout = self.process.stdout
        assert stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(stdout.readline), timeout)
        if not line:
            raise RuntimeError(f"a client child exited ({self.process.poll()}):\n{self.log_tail()}")
        answer: dict[str, Any] = json.loads(line)
        if "failure" in answer:
            raise RuntimeError(f"a client child failed: {answer['failure']}\n{self.log_tail()}")
        return answer

    async def ask(self, command: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.send(command)
        return await self.reply(timeout)

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-3000:]
        return ""

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()  # the child's command loop ends at EOF
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        stop_process(self.process, timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()


async def ask_all(
    children: Sequence[ClientChild], commands: Sequence[dict[str, Any]], timeout: float
) -> list[dict[str, Any]]:
    for child, command in zip(children, commands, strict=True):
        child.send(command)
    return list(await asyncio.gather(*(child.reply(timeout) for child in children)))


def child_main(mode: str, config_json: str) -> None:
    signal.alarm(CHILD_LIFETIME)
    logging.disable(logging.INFO)
    raise_nofile_limit()
    config = json.loads(config_json)
    runner = IdleClient(config) if mode == "--idle-client" else StreamClient(config)
    out = sys.stdout

    async def loop() -> None:
        try:
            for _ in range(MAX_COMMANDS):
                line = await asyncio.to_thread(sys.stdin.readline)
                if not line:
                    return
                try:
                    answer = await runner.handle(json.loads(line))
                except Exception as exc:
                    answer = {"failure": repr(exc)}
                out.write(json.dumps(answer) + "\n")
                out.flush()
        finally:
            await runner.close()

    asyncio.run(loop())


class Gates:
    """At most `per_address` handshakes at a time per source address, and `total` in all."""

    def __init__(self, addresses: Sequence[str], per_address: int, total: int) -> None:
        self.addresses = list(addresses)
        self.total = asyncio.Semaphore(total)
        self.per_address = {address: asyncio.Semaphore(per_address) for address in self.addresses}


class Frame(msgspec.Struct):
    type: str
    request_id: str | None = None
    conversation_id: str | None = None
    run_id: str | None = None
    text: str | None = None
    status: str | None = None
    error: dict[str, Any] | None = None
    offset: int | None = None  # an append delta's (`delta_append`)
    append: str | None = None
    stream: int | None = None  # names the message in packed frames (`delta_packed`)


FRAME_DECODER: Final = msgspec.json.Decoder(Frame)
PACKED_DECODER: Final = msgspec.json.Decoder(tuple[str, int, int, str])  # ["d", stream, offset, append]


async def open_socket(
    url: str, address: str, secret: str, compression: str | None, features: Sequence[str] = ()
) -> tuple[ClientConnection, float]:
    """Connect from `address`, say hello (asking for `features`); the socket and the time from hello to `ready`."""
    ws = await connect(
        url,
        local_addr=(address, 0),
        compression="deflate" if compression else None,
        max_size=None,
        ping_interval=None,
        open_timeout=TIMEOUT,
    )
    try:
        started = time.perf_counter()
        await ws.send(hello_frame(secret, features))
        raw = await asyncio.wait_for(ws.recv(), TIMEOUT)
        took = time.perf_counter() - started
        if FRAME_DECODER.decode(raw).type != "ready":
            raise RuntimeError(f"hello was answered with {raw!r}")
    except BaseException:
        ws.transport.abort()
        raise
    return ws, took


async def close_all(sockets: Sequence[ClientConnection]) -> None:
    gate = asyncio.Semaphore(IN_FLIGHT_PER_CLIENT)

    async def one(ws: ClientConnection) -> None:
        async with gate:
            try:
                await asyncio.wait_for(ws.close(), 10)
            except Exception:
                ws.transport.abort()

    await asyncio.gather(*(one(ws) for ws in sockets))


class IdleClient:
    """Opens idle authenticated sockets on `{"open": n}`; socket i says hello with tokens[i // 30]."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.url: str = config["url"]
        self.tokens: list[str] = config["tokens"]
        self.compression: str | None = config["compression"]
        self.addresses = loopback_addresses(int(config["block"]))
        self.sockets: list[ClientConnection] = []
        self.gates: Gates | None = None

    async def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        if "open" in command:
            return await self.open(int(command["open"]))
        if "check" in command:
            return {"open_now": sum(ws.close_code is None for ws in self.sockets)}
        raise ValueError(f"unknown command {command}")

    async def open(self, count: int) -> dict[str, Any]:
        gates = self.gates = self.gates or Gates(self.addresses, PER_ADDRESS_IN_FLIGHT, IN_FLIGHT_PER_CLIENT)
        first = len(self.sockets)
        if (first + count + SOCKETS_PER_ACCOUNT - 1) // SOCKETS_PER_ACCOUNT > len(self.tokens):
            raise ValueError(f"{first + count} sockets need more than {len(self.tokens)} accounts")

        async def one(index: int) -> tuple[ClientConnection, float]:
            address = gates.addresses[index % len(gates.addresses)]
            async with gates.total, gates.per_address[address]:
                return await open_socket(self.url, address, self.tokens[index // SOCKETS_PER_ACCOUNT], self.compression)

        started = time.monotonic()
        results = await asyncio.gather(*(one(i) for i in range(first, first + count)), return_exceptions=True)
        opened = [r for r in results if isinstance(r, tuple)]
        failures = [r for r in results if not isinstance(r, tuple)]
        self.sockets.extend(ws for ws, _ in opened)
        return {
            "opened": len(opened),
            "failed": len(failures),
            "error": repr(failures[0]) if failures else None,
            "hello": [took for _, took in opened],
            "seconds": time.monotonic() - started,
            "open_now": sum(ws.close_code is None for ws in self.sockets),
        }

    async def close(self) -> None:
        await close_all(self.sockets)


@dataclass
class Conversation:
    conversation_id: str
    tag: str
    frames: list[tuple[float, int]] = field(default_factory=list)  # arrival, text length (delta / complete)
    status: str | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)


class StreamSocket:
    """One account's socket: requests matched by request_id, each conversation's text frames timed."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.conversations: dict[str, Conversation] = {}
        self.streams: dict[int, Conversation] = {}  # packed frames name their message by stream
        self.errors: list[str] = []
        self._waiters: dict[str, asyncio.Future[Frame]] = {}
        self._ids = 0
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for raw in self.ws:
                arrived = time.time()
                if raw[:1] in ("[", b"["):  # a packed continuation: the draft is `offset` long, then `append`
                    _, stream, offset, append = PACKED_DECODER.decode(raw)
                    if (known := self.streams.get(stream)) is not None:
                        known.frames.append((arrived, offset + len(append)))
                    continue
                frame = FRAME_DECODER.decode(raw)
                if frame.type in ("message.delta", "message.complete"):
                    conversation = self.conversations.get(frame.conversation_id or "")
                    if conversation is not None:
                        if frame.stream is not None:
                            self.streams[frame.stream] = conversation
                        length = (
                            len(frame.text) if frame.text is not None else (frame.offset or 0) + len(frame.append or "")
                        )
                        conversation.frames.append((arrived, length))
                elif frame.type == "run.finished":
                    conversation = self.conversations.get(frame.conversation_id or "")
                    if conversation is not None:
                        conversation.status = frame.status
                        conversation.finished.set()
                elif frame.type == "error" and len(self.errors) < 10:
                    self.errors.append(raw if isinstance(raw, str) else raw.decode())
                waiter = self._waiters.pop(frame.request_id, None) if frame.request_id else None
                if waiter is not None and not waiter.done():
                    waiter.set_result(frame)

    async def request(self, type_: str, **fields: Any) -> Frame:
        self._ids += 1
        request_id = f"r{self._ids}"
        waiter: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        self._waiters[request_id] = waiter
        await self.ws.send(json.dumps({"type": type_, "request_id": request_id, **fields}))
        reply = await asyncio.wait_for(waiter, TIMEOUT)
        if reply.type == "error":
            raise RuntimeError(f"{type_} failed: {reply.error}")
        return reply

    async def close(self) -> None:
        await close_all([self.ws])
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._reader, 10)


class StreamClient:
    """One socket per account (`tokens`), `runs[i]` conversations on account i, each with its tag;
    `{"prepare"}` connects and makes the conversations, `{"go": at}` sends every chat.send from `at`
    on, `ramp` apart, waits for every run.finished and writes the frames to `results`."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.sockets: list[StreamSocket] = []

    async def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        if "prepare" in command:
            return await self.prepare()
        if "go" in command:
            return await self.go(float(command["go"]), float(command["ramp"]), float(command["timeout"]))
        raise ValueError(f"unknown command {command}")

    async def prepare(self) -> dict[str, Any]:
        config = self.config
        gates = Gates(loopback_addresses(int(config["block"])), PER_ADDRESS_IN_FLIGHT, IN_FLIGHT_PER_CLIENT)

        async def one(index: int, token: str, tags: list[str]) -> StreamSocket:
            address = gates.addresses[index % len(gates.addresses)]
            async with gates.total, gates.per_address[address]:
                ws, _ = await open_socket(config["url"], address, token, config["compression"], config["features"])
            socket = StreamSocket(ws)
            for tag in tags:
                created = await socket.request("conversation.create", name=tag)
                conversation_id = created.conversation_id or ""
                socket.conversations[conversation_id] = Conversation(conversation_id, tag)
            return socket

        accounts = zip(config["tokens"], config["tags"], strict=True)
        self.sockets = list(await asyncio.gather(*(one(i, token, tags) for i, (token, tags) in enumerate(accounts))))
        return {"ready": sum(len(s.conversations) for s in self.sockets)}

    async def go(self, at: float, ramp: float, timeout: float) -> dict[str, Any]:
        body: str = self.config["body"]
        pairs = [(socket, c) for socket in self.sockets for c in socket.conversations.values()]
        pairs.sort(key=lambda pair: pair[1].tag)
        offset: float = self.config["offset"]
        send_errors: list[str] = []

        async def send(index: int, socket: StreamSocket, conversation: Conversation) -> None:
            await asyncio.sleep(max(0.0, at + (offset + index * self.config["stride"]) * ramp - time.time()))
            try:
                await socket.request(
                    "chat.send", conversation_id=conversation.conversation_id, text=f"{conversation.tag} {body}"
                )
            except Exception as exc:
                send_errors.append(repr(exc))
                conversation.finished.set()

        await asyncio.gather(*(send(i, s, c) for i, (s, c) in enumerate(pairs)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(c.finished.wait() for _, c in pairs)), timeout)
        results = {c.tag: {"frames": c.frames, "status": c.status} for _, c in pairs}
        path = Path(self.config["results"])
        path.write_text(json.dumps(results))
        errors = send_errors + [e for s in self.sockets for e in s.errors]
        return {"done": str(path), "errors": errors[:10], "error_count": len(errors)}

    async def close(self) -> None:
        await asyncio.gather(*(socket.close() for socket in self.sockets))


# --- CPU over time ----------------------------------------------------------------------------------


class CpuSampler:
    """Every 0.2 s: the CPU seconds of each named group of processes, the seconds they waited for a CPU
    ("<name> waited"), and the machine's busy seconds ("machine")."""

    def __init__(self, groups: dict[str, list[ProcessCpu]], loop: ProcessCpu) -> None:
        self.groups = groups
        self.loop = loop  # the process whose main thread is sampled too ("loop", "loop waited")
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._task: asyncio.Task[None] | None = None

    def _sample(self) -> None:
        values = {name: sum(p.cpu() for p in members) for name, members in self.groups.items()}
        values.update({f"{name} waited": sum(p.waited() for p in members) for name, members in self.groups.items()})
        values["loop"], values["loop waited"] = self.loop.main_thread()
        machine = psutil.cpu_times()
        values["machine"] = float(sum(machine)) - machine.idle - getattr(machine, "iowait", 0.0)
        self.samples.append((time.time(), values))

    async def _run(self, limit: float) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            self._sample()
            await asyncio.sleep(0.2)

    def start(self, limit: float) -> None:
        self._task = asyncio.create_task(self._run(limit))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._sample()

    def rates(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds per second of each group between the samples nearest inside [start, end]."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2:
            inside = [self.samples[0], self.samples[-1]]
        (t0, first), (t1, last) = inside[0], inside[-1]
        return {name: (last[name] - first[name]) / max(t1 - t0, 1e-9) for name in first}


# --- idle sockets ----------------------------------------------------------------------------------


@dataclass
class IdleStep:
    sockets: int
    open_now: int
    failed: int
    error: str | None
    rss: int  # 2 s after the step's last ready
    rss_pinged: int | None  # once every socket has had a keepalive ping (None: not waited for, --quick)
    seconds: float  # the step's opening, first connect to last ready
    hello_cpu: float  # server CPU seconds over the opening, per socket opened
    waited: float  # the share of the opening the server's threads waited for a CPU (other load)
    hellos: list[float]
    probes: list[float]
    idle_cpu: float  # CPU seconds per second, all sockets open (over a keepalive period unless --quick)


async def probe(url: str, token: str, count: int) -> list[float]:
    times = []
    for _ in range(count):
        ws, took = await open_socket(url, "127.0.0.1", token, "deflate")
        times.append(took)
        await close_all([ws])
    return times


async def idle_phase(args: argparse.Namespace, root: Path, cpus: Cpus) -> tuple[int, list[IdleStep]]:
    steps: list[int] = args.idle_steps
    clients = args.idle_clients
    per_client = math.ceil(max(steps) / clients)
    accounts_per_client = math.ceil(per_client / SOCKETS_PER_ACCOUNT)
    data_dir = root / "idle"
    tokens = await make_accounts(data_dir, accounts_per_client * clients + 1)
    probe_token = tokens.pop()
    demo = DemoChild(API_KEY, root / "idle-demo.log")
    server: Server | None = None
    children: list[ClientChild] = []
    try:
        flags = demo.server_flags(
            data_dir, free_port(), SECRET, ws_hello_timeout=TIMEOUT, ws_max_connections=max(steps) + 1000
        )
        server = Server(flags, root / "idle-server.log", None, cpus[0])
        await probe(server.ws_url, probe_token, 20)  # warm-up
        await asyncio.sleep(1.0)
        before = server.rss()
        for k in range(clients):
            config = {
                "url": server.ws_url,
                "tokens": tokens[k * accounts_per_client : (k + 1) * accounts_per_client],
                "compression": None if args.no_compression else "deflate",
                "block": 20 + k,
            }
            children.append(ClientChild("--idle-client", config, root / f"idle-client-{k}.log"))
        results: list[IdleStep] = []
        held = 0
        for target in steps:
            shares = [target // clients + (1 if k < target % clients else 0) for k in range(clients)]
            counts = [share - (held // clients + (1 if k < held % clients else 0)) for k, share in enumerate(shares)]
            opening_cpu, opening_wait, opening = server.usage.cpu(), server.usage.waited(), time.monotonic()
            answers = await ask_all(children, [{"open": n} for n in counts], TIMEOUT * 10)
            opening_cpu = server.usage.cpu() - opening_cpu
            waited = (server.usage.waited() - opening_wait) / (time.monotonic() - opening)
            held = target
            await asyncio.sleep(2.0)
            rss = server.rss()
            cpu0, t0 = server.usage.cpu(), time.monotonic()
            # The server pings each socket WS_PING_SECONDS after it opened (then every WS_PING_SECONDS):
            # memory that a ping makes is there only after that.
            await asyncio.sleep(3.0 if args.quick else WS_PING_SECONDS + 2.0)
            idle_cpu = (server.usage.cpu() - cpu0) / (time.monotonic() - t0)
            rss_pinged = None if args.quick else server.rss()
            probes = await probe(server.ws_url, probe_token, args.probes)
            checks = await ask_all(children, [{"check": True}] * clients, TIMEOUT)
            step = IdleStep(
                sockets=target,
                open_now=sum(int(c["open_now"]) for c in checks),
                failed=sum(int(a["failed"]) for a in answers),
                error=next((a["error"] for a in answers if a["error"]), None),
                rss=rss,
                rss_pinged=rss_pinged,
                seconds=max(float(a["seconds"]) for a in answers),
                hello_cpu=opening_cpu / max(1, sum(int(a["opened"]) for a in answers)),
                waited=waited,
                hellos=[float(x) for a in answers for x in a["hello"]],
                probes=probes,
                idle_cpu=idle_cpu,
            )
            results.append(step)
            print_idle_step(step, before)
            if step.failed:
                break
        return before, results
    except Exception:
        if server is not None:
            print(server.log_tail(), file=sys.stderr)
        raise
    finally:
        for child in children:
            child.stop()
        if server is not None:
            server.stop()
        demo.stop()


def kib_per_socket(rss: int | None, before: int, sockets: int) -> float:
    return math.nan if rss is None else (rss - before) / max(sockets, 1) / 1024


def cell(value: float, width: int, digits: int = 1) -> str:
    """A number right-aligned in `width`, or "-" where there is none (NaN)."""
    return f"{'-':>{width}}" if math.isnan(value) else f"{value:>{width}.{digits}f}"


def mib(rss: int | None) -> float:
    return math.nan if rss is None else rss / MiB


def print_idle_step(step: IdleStep, before: int) -> None:
    failed = f"{step.failed} failed" + (f", e.g. {step.error}" if step.error else "")
    print(
        f"  {step.sockets:>6} sockets: {step.open_now:>6} open ({failed}),"
        f" RSS {mib(step.rss):6.1f} MiB ({kib_per_socket(step.rss, before, step.open_now):4.1f} KiB/socket), after a "
        f"keepalive ping {cell(mib(step.rss_pinged), 6)} MiB "
        f"({cell(kib_per_socket(step.rss_pinged, before, step.open_now), 4)} KiB/socket); opened in "
        f"{step.seconds:5.1f} s, {step.hello_cpu * 1000:4.2f} ms of server CPU each; hello "
        f"p50/p99 {ms(step.hellos, 50):5.1f} / {ms(step.hellos, 99):6.1f} ms; probe p50/p99 {ms(step.probes, 50):5.2f} "
        f"/ {ms(step.probes, 99):5.2f} ms; idle CPU {step.idle_cpu * 1000:5.1f} ms/s; the server waited for a CPU "
        f"{step.waited * 100:.0f}% of the opening",
        flush=True,
    )


# --- concurrent streams ----------------------------------------------------------------------------


@dataclass
class StreamStep:
    runs: int
    finished: int
    samples: int
    latencies: list[float]
    reader: list[float]  # emission -> the server's run reader got it
    onward: list[float]  # the server's run reader got it -> the client had its text
    steady_seconds: float
    cpu: dict[str, float]
    pings: list[float]  # ping -> pong round trips of a quiet socket (the owner's), every 100 ms
    errors: list[str]
    missing: int  # deltas whose text no frame showed


class Pinger:
    """A quiet socket (the owner's: no runs) that sends `ping` every 100 ms and times each `pong`: how
    long the server's event loop takes to answer while it streams."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.times: list[tuple[float, float]] = []  # sent (epoch), round trip (s)
        self._ws: ClientConnection | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self, limit: float) -> None:
        self._ws, _ = await open_socket(self.url, "127.0.0.1", SECRET, "deflate")
        self._task = asyncio.create_task(self._run(self._ws, limit))

    async def _run(self, ws: ClientConnection, limit: float) -> None:
        deadline = time.monotonic() + limit
        for n in range(int(limit * 10) + 1):
            if time.monotonic() > deadline:
                return
            sent, started = time.time(), time.perf_counter()
            await ws.send(json.dumps({"type": "ping", "request_id": f"p{n}"}))
            for _ in range(100):  # the pong, past any other frame
                if FRAME_DECODER.decode(await asyncio.wait_for(ws.recv(), TIMEOUT)).request_id == f"p{n}":
                    break
            self.times.append((sent, time.perf_counter() - started))
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._ws is not None:
            await close_all([self._ws])


def message_body(words: int) -> str:
    return " ".join(WORDS[(i * 7) % len(WORDS)] for i in range(words))


def read_recorded(directory: Path, tags: set[str], timeout: float) -> dict[str, list[RecordedDelta]]:
    """The recorded deltas of the runs with these tags (waits, bounded, for their files)."""
    found: dict[str, list[RecordedDelta]] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in sorted(directory.glob("*.json")):
            with contextlib.suppress(ValueError, OSError):
                deltas = [(str(d), float(t), float(r)) for d, t, r in json.loads(path.read_text())]
                match = TAG.search("".join(d for d, _, _ in deltas[:8]))
                if match and match.group() in tags:
                    found[match.group()] = deltas
                path.unlink()
        if len(found) >= len(tags):
            break
        time.sleep(0.1)
    return found


def latencies_of(
    recorded: dict[str, list[RecordedDelta]], frames: dict[str, list[tuple[float, int]]]
) -> tuple[list[tuple[float, float, float]], float, float, int]:
    """(timestamp, emission -> client, emission -> reader) of every delta, the steady window, and the
    deltas no frame showed."""
    samples: list[tuple[float, float, float]] = []
    missing = 0
    for tag, deltas in recorded.items():
        arrivals = frames.get(tag, [])
        raw, index = "", 0
        for delta, timestamp, received in deltas:
            raw += delta
            wanted = len(visible_draft(raw))
            while index < len(arrivals) and arrivals[index][1] < wanted:
                index += 1
            if index == len(arrivals):
                missing += 1
                continue
            samples.append((timestamp, arrivals[index][0] - timestamp, received - timestamp))
    runs = [d for d in recorded.values() if d]
    start = max(d[0][2] for d in runs) if runs else 0.0  # every run's reader has had its first delta
    end = min(d[-1][1] for d in runs) if runs else 0.0  # the first run's last delta
    return samples, start, end, missing


async def stream_step(
    count: int,
    args: argparse.Namespace,
    server: Server,
    tokens: list[str],
    demos: list[DemoChild],
    root: Path,
    record_dir: Path,
) -> StreamStep:
    per_account = args.runs_per_account
    accounts = math.ceil(count / per_account)
    tags = [f"cap{count}x{i}" for i in range(count)]
    by_account = [tags[i * per_account : (i + 1) * per_account] for i in range(accounts)]
    clients = min(args.stream_clients, accounts)
    body = message_body(max(1, round(args.seconds / args.delta_delay)))
    children: list[ClientChild] = []
    try:
        for k in range(clients):
            mine = list(range(k, accounts, clients))
            config = {
                "url": server.ws_url,
                "tokens": [tokens[i] for i in mine],
                "tags": [by_account[i] for i in mine],
                "compression": None if args.no_compression else "deflate",
                "features": PACKED_FEATURES if args.packed else [],
                "block": 100 + k,
                "body": body,
                "results": str(root / f"stream-{count}-{k}.json"),
                "offset": k,  # the children's chat.sends interleave: child k sends runs k, k + clients, ...
                "stride": clients,
            }
            children.append(ClientChild("--stream-client", config, root / f"stream-client-{count}-{k}.log"))
        await ask_all(children, [{"prepare": True}] * clients, TIMEOUT * 2)
        sampler = CpuSampler(
            {
                "server": [server.usage],
                "demo": [ProcessCpu(d.pid) for d in demos],
                "clients": [c.usage for c in children],
            },
            server.usage,
        )
        run_timeout = args.seconds * 4 + TIMEOUT
        sampler.start(run_timeout + TIMEOUT)
        pinger = Pinger(server.ws_url)
        await pinger.start(run_timeout + TIMEOUT)
        at = time.time() + 0.5
        try:
            answers = await ask_all(
                children,
                [{"go": at, "ramp": RAMP_PER_RUN, "timeout": run_timeout}] * clients,
                run_timeout + TIMEOUT,
            )
        finally:
            await pinger.stop()
            await sampler.stop()
        frames: dict[str, list[tuple[float, int]]] = {}
        statuses: dict[str, str | None] = {}
        for answer in answers:
            for tag, result in json.loads(Path(answer["done"]).read_text()).items():
                frames[tag] = [(float(a), int(n)) for a, n in result["frames"]]
                statuses[tag] = result["status"]
        recorded = await asyncio.to_thread(read_recorded, record_dir, set(tags), TIMEOUT)
        samples, start, end, missing = latencies_of(recorded, frames)
        steady = [s for s in samples if start <= s[0] <= end]
        if end - start < 1.0:
            steady, start, end = samples, min(s[0] for s in samples), max(s[0] for s in samples)
        errors = [e for a in answers for e in a["errors"]]
        if len(recorded) < count:
            errors.append(f"{count - len(recorded)} runs recorded no deltas")
        return StreamStep(
            runs=count,
            finished=sum(status == "completed" for status in statuses.values()),
            samples=len(steady),
            latencies=[s[1] for s in steady],
            reader=[s[2] for s in steady],
            onward=[s[1] - s[2] for s in steady],
            steady_seconds=end - start,
            cpu=sampler.rates(start, end),
            pings=[rtt for sent, rtt in pinger.times if start <= sent <= end],
            errors=errors,
            missing=missing,
        )
    finally:
        for child in children:
            child.stop()


async def stream_phase(args: argparse.Namespace, root: Path, cpus: Cpus) -> list[StreamStep]:
    steps: list[int] = args.stream_steps
    accounts = math.ceil(max(steps) / args.runs_per_account)
    idle_accounts = math.ceil(args.with_idle / SOCKETS_PER_ACCOUNT)
    demos: list[DemoChild] = []
    server: Server | None = None
    idle: ClientChild | None = None
    try:
        for g in range(args.gateways):
            demos.append(DemoChild(API_KEY, root / f"stream-demo-{g}.log", delta_delay=args.delta_delay))
        data_dir = root / "stream"
        tokens = await make_accounts(data_dir, accounts + idle_accounts, [demo.base_url for demo in demos])
        tokens, idle_tokens = tokens[:accounts], tokens[accounts:]
        record_dir = root / "recorded"
        record_dir.mkdir()
        flags = demos[0].server_flags(
            data_dir,
            free_port(),
            SECRET,
            ws_hello_timeout=TIMEOUT,
            ws_delta_window_ms=args.window_ms,
            ws_append_window_ms=args.append_window_ms,
            ws_max_connections=max(10_000, args.with_idle + accounts + 100),
        )
        server = Server(flags, root / "stream-server.log", record_dir, cpus[0])
        print(f"  {len(demos)} demo Hermes, each with no limit of concurrent runs (max_concurrent_runs=0)", flush=True)
        if args.with_idle:
            config = {
                "url": server.ws_url,
                "tokens": idle_tokens,
                "compression": None if args.no_compression else "deflate",
                "block": 20,
            }
            idle = ClientChild("--idle-client", config, root / "stream-idle-client.log")
            opened = await idle.ask({"open": args.with_idle}, TIMEOUT * 10)
            print(f"  {opened['opened']} idle sockets held through the steps ({opened['failed']} failed)", flush=True)
        results = []
        for count in steps:
            step = await stream_step(count, args, server, tokens, demos, root, record_dir)
            results.append(step)
            print_stream_step(step, args)
        return results
    except Exception:
        if server is not None:
            print(server.log_tail(), file=sys.stderr)
        raise
    finally:
        if idle is not None:
            idle.stop()
        if server is not None:
            server.stop()
        for demo in demos:
            demo.stop()


def within_budget(step: StreamStep, args: argparse.Namespace) -> bool:
    clean = step.finished == step.runs and not step.errors and step.samples > 0
    return clean and ms(step.latencies, 99) <= args.window_ms + BUDGET_EXTRA_MS


def step_notes(step: StreamStep) -> list[str]:
    """What makes a step's latency more than the server's own: the server or the load generator short of CPU."""
    notes = []
    if step.cpu["server waited"] > DISTURBED_WAIT:
        notes.append(f"disturbed: the server waited for a CPU {step.cpu['server waited'] * 100:.0f}% of the time")
    generator = max(step.cpu["demo waited"], step.cpu["clients waited"])
    if generator > SATURATED_WAIT:
        notes.append(
            f"the load generator is short of CPU (the demo Hermes / clients waited {step.cpu['demo waited'] * 100:.0f}"
            f"% / {step.cpu['clients waited'] * 100:.0f}%): an upper bound"
        )
    return notes


def delta_rate(step: StreamStep) -> float:
    """Deltas a second per run in the steady state: below the demo's pace (1 / delta delay), the demo fell behind."""
    return step.samples / max(step.steady_seconds * step.runs, 1e-9)


def print_stream_step(step: StreamStep, args: argparse.Namespace) -> None:
    cpu = step.cpu
    print(
        f"  {step.runs:>4} runs: {step.finished:>4} completed, {step.samples:>6} deltas over "
        f"{step.steady_seconds:4.1f} s; p50 {ms(step.latencies, 50):6.1f}  p99 {ms(step.latencies, 99):6.1f}  "
        "beyond window p99 "
        f"{ms(step.latencies, 99) - args.window_ms:6.1f} ms; emission -> reader p99 {ms(step.reader, 99):6.1f} ms, "
        f"reader -> client p99 {ms(step.onward, 99):6.1f} ms; {delta_rate(step):4.1f} deltas/s a run; ping p50/p99 "
        f"{ms(step.pings, 50):5.1f} / {ms(step.pings, 99):5.1f} ms; CPU: server {cpu['server'] * 100:5.1f}% (waited "
        f"{cpu['server waited'] * 100:4.1f}%; its event loop's thread {cpu['loop'] * 100:4.1f}%, waited "
        f"{cpu['loop waited'] * 100:4.1f}%), demo {cpu['demo'] * 100:5.1f}% "
        f"(waited {cpu['demo waited'] * 100:4.1f}%), "
        f"clients {cpu['clients'] * 100:5.1f}% (waited {cpu['clients waited'] * 100:4.1f}%), "
        f"machine {cpu['machine'] * 100:5.1f}% (of {os.cpu_count()} cores)"
        + (f"; {step.missing} deltas never shown" if step.missing else "")
        + "".join(f"; WARNING: {note}" for note in step_notes(step))
        + (f"; errors: {step.errors[:3]}" if step.errors else ""),
        flush=True,
    )


# --- the report ------------------------------------------------------------------------------------


def report_idle(args: argparse.Namespace, before: int, steps: list[IdleStep]) -> None:
    offered = "not offered" if args.no_compression else "offered"
    print(
        f"idle authenticated sockets (permessage-deflate {offered}), server RSS before them {before / MiB:.1f} MiB; "
        "RSS at ready / after every socket's first keepalive ping; the step's hellos while "
        f"{IN_FLIGHT_PER_CLIENT * args.idle_clients} are in flight; probe hellos one at a time:"
    )
    print(
        f"{'sockets':>8}{'open':>7}{'RSS MiB':>9}{'KiB/sock':>10}{'pinged MiB':>12}{'KiB/sock':>10}{'hellos/s':>10}"
        f"{'CPU/hello':>11}{'hello p50':>11}{'hello p99':>11}{'probe p50':>11}{'probe p99':>11}{'idle CPU':>10}"
    )
    for s in steps:
        rate = len(s.hellos) / max(s.seconds, 1e-9)
        print(
            f"{s.sockets:>8}{s.open_now:>7}{mib(s.rss):>9.1f}{kib_per_socket(s.rss, before, s.open_now):>10.1f}"
            f"{cell(mib(s.rss_pinged), 12)}{cell(kib_per_socket(s.rss_pinged, before, s.open_now), 10)}{rate:>10.0f}"
            f"{s.hello_cpu * 1000:>9.2f}ms{ms(s.hellos, 50):>11.1f}{ms(s.hellos, 99):>11.1f}{ms(s.probes, 50):>11.2f}"
            f"{ms(s.probes, 99):>11.2f}{s.idle_cpu * 1000:>6.1f}ms/s"
        )
    target = f"target: {TARGET_IDLE_SOCKETS:,} idle sockets in <= {TARGET_IDLE_MIB:g} MiB of server RSS"
    top = next((s for s in steps if s.sockets >= TARGET_IDLE_SOCKETS), None)
    if top is None:
        print(f"{target}: not measured (no step of {TARGET_IDLE_SOCKETS:,})")
        return
    rss = max(top.rss, top.rss_pinged or 0)
    met = top.open_now >= TARGET_IDLE_SOCKETS and rss / MiB <= TARGET_IDLE_MIB
    pinged = "" if top.rss_pinged is not None else ", not waited for a keepalive ping (--quick)"
    print(f"{target}: {'met' if met else 'NOT met'} ({top.open_now:,} open, {rss / MiB:.1f} MiB{pinged})")


def report_streams(args: argparse.Namespace, steps: list[StreamStep], pinned: bool) -> None:
    budget = args.window_ms + BUDGET_EXTRA_MS
    idle = f", {args.with_idle:,} idle sockets held meanwhile" if args.with_idle else ""
    print(
        f"concurrent streaming runs{idle}, {args.runs_per_account} per account (one socket each), {args.gateways} demo "
        f"Hermes, a delta every {args.delta_delay * 1000:g} ms for ~{args.seconds:g} s, delta window "
        f"{args.window_ms} ms; clients {'packed append' if args.packed else 'cumulative'} (append window "
        f"{args.append_window_ms} ms); latency = Hermes emission -> the client has the text, in ms, steady state only:"
    )
    print(
        f"{'runs':>6}{'done':>6}{'deltas/s/run':>14}{'p50':>7}{'p99':>7}{'p99-window':>12}{'->reader p99':>14}"
        f"{'reader-> p99':>14}{'ping p99':>10}{'server CPU':>12}{'waited':>8}{'demo CPU':>10}{'waited':>8}"
        f"{'clients':>9}{'in budget':>11}"
    )
    for s in steps:
        p99 = ms(s.latencies, 99)
        verdict = "yes" if within_budget(s, args) else "NO"
        print(
            f"{s.runs:>6}{s.finished:>6}{delta_rate(s):>14.1f}{ms(s.latencies, 50):>7.1f}{p99:>7.1f}"
            f"{p99 - args.window_ms:>12.1f}{ms(s.reader, 99):>14.1f}{ms(s.onward, 99):>14.1f}{ms(s.pings, 99):>10.1f}"
            f"{s.cpu['server'] * 100:>11.1f}%{s.cpu['server waited'] * 100:>7.1f}%{s.cpu['demo'] * 100:>9.1f}%"
            f"{s.cpu['demo waited'] * 100:>7.1f}%{s.cpu['clients'] * 100:>8.1f}%{verdict:>11}"
            + "".join(f"  ({note})" for note in step_notes(s))
        )
    largest = 0
    for s in steps:  # the largest count that, with every smaller one, kept the budget
        if not within_budget(s, args):
            break
        largest = s.runs
    print(f"largest count within p99 <= {budget:g} ms (and every smaller step): {largest or 'none'}")
    core = "the server pinned to one core" if pinned else "the server not pinned"
    target = f"target: >= {TARGET_STREAMS} concurrent runs within p99 <= {budget:g} ms, {core}"
    if max(s.runs for s in steps) < TARGET_STREAMS:
        print(f"{target}: not measured (no step of {TARGET_STREAMS})")
    else:
        print(f"{target}: {'met' if largest >= TARGET_STREAMS else 'NOT met'}")


def int_list(text: str) -> list[int]:
    return sorted({int(part) for part in text.split(",") if part.strip()})


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-child":
        serve_recording_child(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    if len(sys.argv) > 1 and sys.argv[1] in ("--idle-client", "--stream-client"):
        child_main(sys.argv[1], sys.argv[2])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small steps: a smoke run of a minute or so")
    parser.add_argument("--idle-steps", type=int_list, help="idle sockets at each step (comma-separated)")
    parser.add_argument("--stream-steps", type=int_list, help="concurrent runs at each step (comma-separated)")
    parser.add_argument("--only", choices=("idle", "streams"), help="run one part only")
    parser.add_argument("--probes", type=int, default=200, help="fresh probe hellos at each idle step")
    parser.add_argument("--idle-clients", type=int, default=3, help="client processes holding the idle sockets")
    parser.add_argument("--stream-clients", type=int, default=2, help="client processes of the streaming runs")
    parser.add_argument("--gateways", type=int, default=2, help="demo Hermes processes the accounts alternate over")
    parser.add_argument("--runs-per-account", type=int, default=5, help="concurrent runs of one account")
    parser.add_argument("--delta-delay", type=float, default=0.05, help="the demo Hermes's delta pacing (s)")
    parser.add_argument("--seconds", type=float, default=12.0, help="how long each run streams (about)")
    parser.add_argument("--window-ms", type=int, default=100, help="the server's delta window")
    parser.add_argument("--packed", action="store_true", help="streaming clients ask for packed append deltas")
    parser.add_argument("--append-window-ms", type=int, default=0, help="the server's window for append clients")
    parser.add_argument("--with-idle", type=int, default=0, help="idle sockets held while the runs stream")
    parser.add_argument("--no-compression", action="store_true", help="clients do not offer permessage-deflate")
    parser.add_argument("--no-pin", action="store_true", help="do not pin the server to one CPU")
    args = parser.parse_args()
    if args.quick:
        args.idle_steps = args.idle_steps or [500, 1000]
        args.stream_steps = args.stream_steps or [10, 50]
        args.probes = min(args.probes, 50)
        args.seconds = min(args.seconds, 5.0)
    args.idle_steps = args.idle_steps or [1000, 2500, 5000, 7500, 10_000]
    args.stream_steps = args.stream_steps or [10, 25, 50, 100, 200, 300, 400]

    raise_nofile_limit()
    logging.disable(logging.INFO)
    available = sorted(os.sched_getaffinity(0))
    cpus: Cpus = (None, None)
    if not args.no_pin and len(available) >= 2:
        cpus = ({available[0]}, set(available[1:]))
        os.sched_setaffinity(0, cpus[1])  # the bench, the demo Hermes and the clients (children inherit it)
    print(
        f"capacity of one server process: {len(available)} CPUs, server pinned to "
        f"{sorted(cpus[0]) if cpus[0] else 'none'}; load average {os.getloadavg()[0]:.2f} at the start",
        flush=True,
    )
    started = time.monotonic()
    idle: tuple[int, list[IdleStep]] | None = None
    streams: list[StreamStep] | None = None
    with tempfile.TemporaryDirectory(prefix="pheby-bench-") as tmp:
        root = Path(tmp)
        if args.only in (None, "idle"):
            print("idle sockets:", flush=True)
            idle = asyncio.run(idle_phase(args, root, cpus))
        if args.only in (None, "streams"):
            print("concurrent streams:", flush=True)
            streams = asyncio.run(stream_phase(args, root, cpus))
    print()
    if idle is not None:
        report_idle(args, *idle)
    if streams is not None:
        report_streams(args, streams, cpus[0] is not None)
    print(f"took {time.monotonic() - started:.0f} s; load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()

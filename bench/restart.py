"""A restart under load: SIGTERM `pheby serve` with runs mid-stream and clients connected, start it again.

Run: `.venv/bin/python bench/restart.py [--runs 200] [--accounts 50] [--clients 1000] [--messages 10000]
[--words 100] [--delta-delay 0.5] [--keep]`

Everything runs on loopback: `pheby serve` (`tests.crash_safety.ServerProcess`, SQLite on local disk, its
INFO log in a file), the demo Hermes in a process of its own as a 0.22-era gateway (every `--replay`
feature: numbered events, so a stream is reopened after the last event consumed), and the clients in
this process (asyncio + websockets, permessage-deflate offered, as browsers do). The demo child is
`DemoHermesServer` behind a small command loop on its stdin, so that the bench can fill a session of
its store with a long transcript (`bench/history.py` fills it the same way, in-process).

Set-up: `--accounts` accounts made in the data dir's database before the first start, one API token
each (`bench.capacity.make_accounts`); `--clients` sockets spread round-robin over the accounts, each
from a loopback address of its own range (127.0.<40+k>.1-250, 4 sockets an address: the server lets an
address hold 8 that have not said hello), opened 32 at a time, each having said `hello`. `--runs` runs,
round-robin over the accounts, each in a conversation of its own: `/demo say <--words words>`, the
words tagged with the run (`r7.0 r7.1 ...`), one word per Hermes delta `--delta-delay` apart, so every
run is mid-stream at the stop. Every socket of an account gets every delta of its runs (cumulative
`message.delta`s at the default 100 ms window). Two conversations of the first account are given a
transcript of `--messages` messages in the demo's store (one real turn, then the rest filled in):
one is opened before the stop (so the server's turn log matches Hermes), the other is not.

Measured, in order:
1. SIGTERM -> exit: the server is signalled by PID once every run has streamed text, and the time to
   its exit is taken in a thread (target <= 2 s). Its exit code and the sockets' close codes (1012:
   service restart) are checked.
2. Start -> every run re-attached: `pheby serve` is started again on the same data dir; the time from
   its `Popen` to the log line `carried on N run(s) ...; M heard from Hermes within X s` (its N, M and
   X printed), and to `/healthz` answering (target <= 5 s).
3. Text lost or repeated: every `message.delta` a client sees (before and after the restart), the run's
   text in the `conversation.open` snapshot and its `message.complete` are compared with the answer the
   demo was asked to stream: a delta must be a prefix of it and no shorter than the last one the same
   socket saw, the complete equal to it. For a text that is not, `difflib` counts the characters
   missing (lost) and the extra ones (repeated), a delta's not-yet-streamed tail aside; per run the
   largest of each over every frame is summed (target 0 / 0). Every run must end `completed`.
4. The reconnect storm: once `/healthz` answers, every client reconnects at once (no gate beyond 4 an
   address): connect, `hello`, then `conversation.open` (a page of 50) of one of its account's run
   conversations; per client, connect -> history reply (p50 / p99), and the storm's total time.
5. The first `conversation.open` of the `--messages` conversations after the restart, a page of 50 (as
   `bench/history.py` asks; Pheby Web asks 100, the server's default is 200): ms and bytes of the reply
   (the JSON frame, uncompressed), for the one opened before the stop (targets <= 10 ms and <= 100 KB)
   and the one never opened (the server reads its whole transcript once); then an open of a page of
   100 of the first. Taken before the storm, while the runs stream on.

Every process started is stopped by PID at the end, failed or not; `--keep` keeps the data dir and logs.
The scale-down options (`--runs 20 --accounts 5 --clients 100 --messages 1000`) make a quick check.
"""

import argparse
import asyncio
import contextlib
import datetime
import difflib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import msgspec
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.capacity import make_accounts
from bench.support import free_port, raise_nofile_limit, stop_process
from bench.ws_stream import percentile
from tests.crash_safety import ServerProcess

SCRIPT: Final = str(Path(__file__).resolve())
API_KEY: Final = "bench-demo-key-0123456789abcdef"  # the one capacity.make_accounts would give a gateway
PAGE: Final = 50
WEB_PAGE: Final = 100  # Pheby Web's page (web/lib/client.js HISTORY_PAGE)
TIMEOUT: Final = 60.0
OPEN_IN_FLIGHT: Final = 32
PER_ADDRESS: Final = 4
ADDRESSES: Final = 250
FIRST_BLOCK: Final = 40  # 127.0.<40+k>.x
TARGET_EXIT: Final = 2.0
TARGET_REATTACH: Final = 5.0
TARGET_OPEN_MS: Final = 10.0
TARGET_OPEN_BYTES: Final = 100_000
CARRIED: Final = re.compile(
    r"carried on (\d+) run\(s\) a stopped process left; (\d+) heard from Hermes within ([\d.]+) s"
)
CHILD_LIFETIME: Final = 1800  # seconds: a child whose bench vanished ends itself (SIGALRM)


# --- the demo Hermes child: `DemoHermesServer` (replay) and a command loop on stdin ----------------------


def demo_child(options_json: str) -> None:
    """Serve the demo Hermes; print `{"port": n}`, then answer `{"fill": session id, "size": n}` lines."""
    from demo_hermes.newer import NEWER_FEATURES  # only the demo child needs them
    from demo_hermes.server import DemoHermesServer

    signal.alarm(CHILD_LIFETIME)
    logging.disable(logging.INFO)
    # Only the replies go to the parent's pipe (which it reads only for them): anything else printed goes
    # to the log, so that the pipe never fills and blocks the demo.
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def reply(answer: dict[str, Any]) -> None:
        replies.write(json.dumps(answer) + "\n")
        replies.flush()

    with DemoHermesServer(api_key=API_KEY, features=NEWER_FEATURES, **json.loads(options_json)) as demo:
        reply({"port": demo.port})
        for line in sys.stdin:
            command = json.loads(line)
            sessions = demo.state.sessions
            session = sessions.get(command["fill"])
            if session is None:
                reply({"failure": f"no session {command['fill']}"})
                continue
            for index in range(int(command["size"]) - len(session.messages)):
                role = "user" if index % 2 == 0 else "assistant"
                sessions.add_message(session, role, f"{role} message {index} " + "lorem ipsum dolor sit amet " * 4)
            reply({"messages": len(session.messages)})


class DemoProcess:
    """The demo child (`--demo-child`), its stderr in `log_path`; stopped by PID."""

    def __init__(self, delta_delay: float, log_path: Path) -> None:
        self._log = log_path.open("wb")
        options = json.dumps({"delta_delay": delta_delay})
        self.process = subprocess.Popen(
            [sys.executable, SCRIPT, "--demo-child", options],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        self.base_url = f"http://127.0.0.1:{int(self._reply()['port'])}"

    def _reply(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the demo Hermes child exited with {self.process.poll()}")
        reply: dict[str, Any] = json.loads(line)
        if "failure" in reply:
            raise RuntimeError(reply["failure"])
        return reply

    def fill(self, session_id: str, size: int) -> int:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"fill": session_id, "size": size}).encode() + b"\n")
        self.process.stdin.flush()
        return int(self._reply()["messages"])

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        stop_process(self.process, timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()


# --- clients ---------------------------------------------------------------------------------------------


class Snapshot(msgspec.Struct):
    run_id: str
    status: str
    text: str


class Frame(msgspec.Struct):
    type: str
    request_id: str | None = None
    conversation_id: str | None = None
    run_id: str | None = None
    text: str | None = None
    status: str | None = None
    run: Snapshot | None = None
    error: Any = None


DECODE: Final = msgspec.json.Decoder(Frame).decode
UNREADABLE: list[str] = []  # frames not of the shape `Frame` expects (none should be)


@dataclass
class RunText:
    """What the clients saw of one run's text, against the answer it must be."""

    answer: str
    frames: int = 0
    not_prefix: list[str] = field(default_factory=list)  # texts that are not a prefix of the answer (kept 20)
    not_prefix_count: int = 0
    shorter: int = 0  # deltas shorter than the last one the same socket saw
    completes: list[str] = field(default_factory=list)
    statuses: set[str] = field(default_factory=set)
    finished: asyncio.Event = field(default_factory=asyncio.Event)

    def saw(self, text: str) -> None:
        self.frames += 1
        if not self.answer.startswith(text):
            self.not_prefix_count += 1
            if len(self.not_prefix) < 20:
                self.not_prefix.append(text)


class Client:
    """One socket of an account: requests matched by request_id, each run's text checked as it arrives."""

    def __init__(self, index: int, token: str, address: str, runs: dict[str, RunText]) -> None:
        self.index = index
        self.token = token
        self.address = address
        self.runs = runs  # by conversation id, shared by every client
        self.ws: ClientConnection | None = None
        self.close_codes: list[int | None] = []
        self._last: dict[str, int] = {}
        self._waiters: dict[str, asyncio.Future[tuple[Frame, int]]] = {}
        self._ids = 0
        self._reader: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        """Connect and say hello (a fresh socket: the texts seen so far count from scratch)."""
        ws = await connect(
            URL[0],
            local_addr=(self.address, 0),
            compression="deflate",
            max_size=None,
            ping_interval=None,
            open_timeout=TIMEOUT,
        )
        self.ws = ws
        self._last = {}
        self._reader = asyncio.create_task(self._read(ws))
        ready, _ = await self.request("hello", secret=self.token, protocol_version=1, request_id="hello")
        if ready.type != "ready":
            raise RuntimeError(f"hello was answered with {ready}")

    async def _read(self, ws: ClientConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for raw in ws:
                try:
                    frame = DECODE(raw)
                except msgspec.ValidationError:
                    UNREADABLE.append(raw if isinstance(raw, str) else raw.decode())
                    continue
                if frame.request_id is not None:
                    waiter = self._waiters.pop(frame.request_id, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result((frame, len(raw) if isinstance(raw, bytes) else len(raw.encode())))
                run = self.runs.get(frame.conversation_id or "")
                if run is None:
                    continue
                if frame.type == "message.delta" and frame.text is not None:
                    run.saw(frame.text)
                    last = self._last.get(frame.conversation_id or "", 0)
                    if len(frame.text) < last:
                        run.shorter += 1
                    self._last[frame.conversation_id or ""] = len(frame.text)
                elif frame.type == "message.complete" and frame.text is not None:
                    run.completes.append(frame.text)
                elif frame.type == "run.finished":
                    run.statuses.add(frame.status or "?")
                    run.finished.set()
        self.close_codes.append(ws.close_code)
        for waiter in self._waiters.values():
            if not waiter.done():
                waiter.set_exception(ConnectionError("the socket closed"))
        self._waiters.clear()

    async def request(self, type_: str, request_id: str | None = None, **fields: Any) -> tuple[Frame, int]:
        """Send; the reply with the same request_id (an `error` raises) and its size in bytes."""
        assert self.ws is not None
        self._ids += 1
        request_id = request_id or f"r{self._ids}"
        waiter: asyncio.Future[tuple[Frame, int]] = asyncio.get_running_loop().create_future()
        self._waiters[request_id] = waiter
        await self.ws.send(json.dumps({"type": type_, "request_id": request_id, **fields}))
        reply, size = await asyncio.wait_for(waiter, TIMEOUT)
        if reply.type == "error":
            raise RuntimeError(f"{type_} failed: {reply.error}")
        return reply, size

    async def open(self, conversation_id: str, limit: int) -> tuple[Frame, int]:
        reply, size = await self.request("conversation.open", conversation_id=conversation_id, limit=limit)
        run = self.runs.get(conversation_id)
        if run is not None and reply.run is not None:
            run.saw(reply.run.text)
        return reply, size

    async def closed(self, timeout: float) -> None:
        if self._reader is not None:
            await asyncio.wait_for(asyncio.shield(self._reader), timeout)

    async def close(self) -> None:
        if self.ws is not None and self.ws.close_code is None:
            try:
                await asyncio.wait_for(self.ws.close(), 5)
            except Exception:
                self.ws.transport.abort()
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._reader, 5)


URL: list[str] = [""]  # the server's WebSocket URL (its port changes with each start)


def address_of(index: int) -> str:
    """Client i's loopback address: 4 clients an address, 250 addresses a /24."""
    slot = index // PER_ADDRESS
    return f"127.0.{FIRST_BLOCK + slot // ADDRESSES}.{slot % ADDRESSES + 1}"


async def connect_all(clients: Sequence[Client], in_flight: int | None) -> list[float]:
    """Connect every client (at most `in_flight` at a time; None: all at once); each one's seconds."""
    gate = asyncio.Semaphore(in_flight or len(clients))

    async def one(client: Client) -> float:
        async with gate:
            started = time.perf_counter()
            await client.connect()
            return time.perf_counter() - started

    return list(await asyncio.gather(*(one(client) for client in clients)))


# --- the server ------------------------------------------------------------------------------------------


def start_server(data_dir: Path, demo: DemoProcess, log_path: Path) -> tuple[ServerProcess, float]:
    port = free_port()
    env = {"HERMES_URL": demo.base_url, "HERMES_API_KEY": API_KEY, "PHEBY_WS_HELLO_TIMEOUT": str(TIMEOUT)}
    started = time.monotonic()
    server = ServerProcess(data_dir, port, log_path, env_extra=env)
    URL[0] = server.ws_url
    return server, started


def wait_up(server: ServerProcess, started: float) -> tuple[float, re.Match[str] | None, float | None]:
    """Poll (in this thread) until `/healthz` answers: its time from the start, and the re-attach log
    line with its time (the line is looked for every 10 ms, up to 10 s after `/healthz` answered)."""
    up: float | None = None
    carried: tuple[re.Match[str], float] | None = None
    deadline = started + TIMEOUT
    with httpx.Client(base_url=server.base_url, timeout=2) as http:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                raise RuntimeError(f"the server exited with {server.process.returncode}: {server.log()[-3000:]}")
            if carried is None and (match := CARRIED.search(server.log())):
                carried = match, time.monotonic() - started
            if up is None:
                with contextlib.suppress(httpx.TransportError):
                    if http.get("/healthz").status_code == 200:
                        up = time.monotonic() - started
            if up is not None and (carried is not None or time.monotonic() - started > up + 10):
                break
            time.sleep(0.01)
    if up is None:
        raise RuntimeError(f"no /healthz within {TIMEOUT:g} s: {server.log()[-3000:]}")
    return up, carried[0] if carried else None, carried[1] if carried else None


def sigterm_and_wait(server: ServerProcess) -> tuple[float, float, float]:
    """SIGTERM by PID; the seconds until the process exited (taken in this thread), and the wall-clock
    times of the signal and the exit."""
    signalled, started = time.time(), time.monotonic()
    os.kill(server.pid, signal.SIGTERM)
    server.process.wait(timeout=TIMEOUT)
    return time.monotonic() - started, signalled, time.time()


STOP_STEPS: Final = (
    ("the loop took the signal", "pheby.server: stopping: handing"),
    ("runs handed over, queues drained", "uvicorn.error: Shutting down"),
    ("sockets closed (1012), lifespan ended", "uvicorn.error: Finished server process"),
)


def stop_steps(log: str, signalled: float, exited: float) -> list[tuple[str, float]]:
    """Where the stop's time went, from the server log's timestamps (local time, ms): each step's seconds."""
    steps: list[tuple[str, float]] = []
    last = signalled
    for what, marker in STOP_STEPS:
        line = next((line for line in log.splitlines() if marker in line), None)
        if line is None:
            continue
        local = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").astimezone()  # logging: local time
        at = local.timestamp()
        steps.append((what, at - last))
        last = at
    steps.append(("the process exited", exited - last))
    return steps


# --- the bench -------------------------------------------------------------------------------------------


@dataclass
class Results:
    exit_seconds: float = 0.0
    exit_code: int | None = None
    stop_steps: list[tuple[str, float]] = field(default_factory=list)
    close_codes: dict[str, int] = field(default_factory=dict)
    up_seconds: float = 0.0
    carried_seconds: float | None = None
    carried: tuple[int, int, float] | None = None
    journaled_at_stop: int = 0
    storm: list[float] = field(default_factory=list)  # connect -> history reply, per client
    storm_ready: list[float] = field(default_factory=list)  # connect -> ready
    storm_total: float = 0.0
    storm_failures: list[str] = field(default_factory=list)
    opens: list[tuple[str, float, int, int]] = field(default_factory=list)  # what, ms, bytes, messages
    lost: int = 0
    repeated: int = 0
    not_prefix: int = 0
    shorter: int = 0
    frames: int = 0
    bad_completes: int = 0
    no_complete: int = 0
    not_completed: dict[str, int] = field(default_factory=dict)
    unfinished: int = 0


def journaled_runs(data_dir: Path) -> int:
    import sqlite3

    with contextlib.closing(sqlite3.connect(data_dir / "pheby.sqlite3")) as conn:
        count: int = conn.execute("SELECT count(*) FROM active_runs").fetchone()[0]
        return count


def differences(answer: str, text: str, *, complete: bool) -> tuple[int, int]:
    """Characters of `answer` missing from `text`, and characters of `text` not in `answer` (a delta's
    not-yet-streamed tail of the answer is not missing)."""
    lost = repeated = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, answer, text, autojunk=False).get_opcodes():
        if tag == "delete" and i2 == len(answer) and j1 == len(text) and not complete:
            continue
        if tag in ("delete", "replace"):
            lost += i2 - i1
        if tag in ("insert", "replace"):
            repeated += j2 - j1
    return lost, repeated


def judge_texts(runs: dict[str, RunText], results: Results) -> None:
    for run in runs.values():
        results.frames += run.frames
        results.not_prefix += run.not_prefix_count
        results.shorter += run.shorter
        worst_lost = worst_repeated = 0
        for text in run.not_prefix:
            lost, repeated = differences(run.answer, text, complete=False)
            worst_lost, worst_repeated = max(worst_lost, lost), max(worst_repeated, repeated)
        for text in run.completes:
            lost, repeated = differences(run.answer, text, complete=True)
            worst_lost, worst_repeated = max(worst_lost, lost), max(worst_repeated, repeated)
            results.bad_completes += text != run.answer
        if not run.completes:
            results.no_complete += 1
            worst_lost = max(worst_lost, len(run.answer))
        results.lost += worst_lost
        results.repeated += worst_repeated
        if not run.finished.is_set():
            results.unfinished += 1
        for status in run.statuses - {"completed"}:
            results.not_completed[status] = results.not_completed.get(status, 0) + 1


async def long_conversation(client: Client, demo: DemoProcess, size: int) -> str:
    """A conversation whose Hermes session holds `size` messages (one real turn, the rest filled in)."""
    created, _ = await client.request("conversation.create", name=f"{size} messages")
    conversation_id = str(created.conversation_id)
    watch = RunText(answer="You said: hello")
    client.runs[conversation_id] = watch
    await client.request("chat.send", conversation_id=conversation_id, text="hello")
    await asyncio.wait_for(watch.finished.wait(), TIMEOUT)
    del client.runs[conversation_id]
    await asyncio.sleep(0.5)  # the server logs the turn after run.finished
    await asyncio.to_thread(demo.fill, f"pheby_{conversation_id}", size)
    return conversation_id


async def timed_open(client: Client, conversation_id: str, limit: int) -> tuple[float, int]:
    """`conversation.open` of a page of `limit`: ms to the reply, and the reply's bytes."""
    started = time.perf_counter()
    reply, size = await client.request("conversation.open", conversation_id=conversation_id, limit=limit)
    took = (time.perf_counter() - started) * 1000
    if reply.type != "conversation.history":
        raise RuntimeError(f"conversation.open was answered with {reply.type}")
    return took, size


async def bench(args: argparse.Namespace, root: Path, results: Results, started: list[Any]) -> None:
    data_dir = root / "data"
    tokens = await make_accounts(data_dir, args.accounts)
    demo = DemoProcess(args.delta_delay, root / "demo.log")
    started.append(demo)
    server, _ = start_server(data_dir, demo, root / "server-1.log")
    started.append(server)
    await asyncio.to_thread(wait_up, server, time.monotonic())

    runs: dict[str, RunText] = {}
    clients = [Client(i, tokens[i % args.accounts], address_of(i), runs) for i in range(args.clients)]
    first = clients[0]  # of account 0
    await first.connect()
    print(f"connecting {args.clients} clients over {args.accounts} accounts ...", flush=True)
    began = time.monotonic()
    await connect_all(clients[1:], OPEN_IN_FLIGHT)
    print(f"  connected in {time.monotonic() - began:.1f} s", flush=True)

    long = await long_conversation(first, demo, args.messages)
    await timed_open(first, long, PAGE)  # read once before the stop, as a client would have

    # The runs: run k on account k % accounts, created on that account's first socket.
    by_account = {i: clients[i] for i in range(args.accounts)}
    conversations: list[str] = []
    account_conversations: dict[int, list[str]] = {i: [] for i in range(args.accounts)}
    for k in range(args.runs):
        created, _ = await by_account[k % args.accounts].request("conversation.create", name=f"run {k}")
        conversation_id = str(created.conversation_id)
        conversations.append(conversation_id)
        account_conversations[k % args.accounts].append(conversation_id)
        runs[conversation_id] = RunText(answer=" ".join(f"r{k}.{i}" for i in range(args.words)))

    print(f"starting {args.runs} runs of {args.words} words, a word every {args.delta_delay:g} s ...", flush=True)

    async def send(k: int, conversation_id: str) -> None:
        await asyncio.sleep(k * 0.01)
        await by_account[k % args.accounts].request(
            "chat.send", conversation_id=conversation_id, text=f"/demo say {runs[conversation_id].answer}"
        )

    await asyncio.gather(*(send(k, c) for k, c in enumerate(conversations)))
    deadline = time.monotonic() + TIMEOUT
    while any(run.frames == 0 for run in runs.values()):
        if time.monotonic() > deadline:
            raise RuntimeError("some runs streamed no text")
        await asyncio.sleep(0.1)
    await asyncio.sleep(2 * args.delta_delay)
    if any(run.finished.is_set() for run in runs.values()):
        raise RuntimeError("a run ended before the stop: make --words larger")

    # 1. SIGTERM -> exit.
    results.exit_seconds, signalled, exited = await asyncio.to_thread(sigterm_and_wait, server)
    results.exit_code = server.process.returncode
    results.stop_steps = stop_steps(server.log(), signalled, exited)
    await asyncio.gather(*(client.closed(10) for client in clients), return_exceptions=True)
    for client in clients:
        code = str(client.close_codes[-1] if client.close_codes else "open")
        results.close_codes[code] = results.close_codes.get(code, 0) + 1
    results.journaled_at_stop = journaled_runs(data_dir)
    print(f"  stopped in {results.exit_seconds:.2f} s; {results.journaled_at_stop} runs journaled", flush=True)

    # 2. Start -> every run re-attached.
    server, begun = start_server(data_dir, demo, root / "server-2.log")
    started.append(server)
    up, carried, carried_seconds = await asyncio.to_thread(wait_up, server, begun)
    results.up_seconds, results.carried_seconds = up, carried_seconds
    if carried is not None:
        results.carried = int(carried[1]), int(carried[2]), float(carried[3])
    print(f"  up again in {up:.2f} s", flush=True)

    # 5. The first opens of the long conversations (before the storm, the runs streaming on).
    prober = Client(args.clients, tokens[0], "127.0.0.1", {})
    await prober.connect()
    for what, limit in (("first", PAGE), ("second", PAGE), ("third (Pheby Web's page)", WEB_PAGE)):
        took, size = await timed_open(prober, long, limit)
        results.opens.append((what, took, size, limit))
    await prober.close()

    # 4. The storm: every client at once, hello then conversation.open.
    async def reconnect(client: Client) -> tuple[float, float]:
        began = time.perf_counter()
        await client.connect()
        ready = time.perf_counter()
        account = client.index % args.accounts
        own = account_conversations[account] or [long]
        await client.open(own[(client.index // args.accounts) % len(own)], PAGE)
        return time.perf_counter() - began, ready - began

    storm_began = time.perf_counter()
    outcomes = await asyncio.gather(*(reconnect(c) for c in clients), return_exceptions=True)
    results.storm_total = time.perf_counter() - storm_began
    results.storm = [o[0] for o in outcomes if isinstance(o, tuple)]
    results.storm_ready = [o[1] for o in outcomes if isinstance(o, tuple)]
    results.storm_failures = [repr(o) for o in outcomes if not isinstance(o, tuple)]
    print(f"  storm of {len(clients)} reconnects in {results.storm_total:.2f} s", flush=True)

    # 3. Every run to its end, its text checked.
    remaining = args.words * args.delta_delay + TIMEOUT
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(run.finished.wait() for run in runs.values())), remaining)
    await asyncio.sleep(0.5)  # the last frames of other sockets
    judge_texts(runs, results)
    await asyncio.gather(*(client.close() for client in clients))


def ms(values: Sequence[float], q: float) -> str:
    return f"{percentile(values, q) * 1000:.0f}" if values else "-"


def verdict(ok: bool) -> str:
    return "ok" if ok else "NOT MET"


def report(args: argparse.Namespace, results: Results) -> None:
    print()
    print(
        f"restart under load: {args.runs} runs of {args.words} words ({args.delta_delay:g} s a word) over "
        f"{args.accounts} accounts, {args.clients} authenticated sockets (permessage-deflate), demo Hermes "
        "with replay, each in a process of its own"
    )
    codes = ", ".join(f"{n} x {code}" for code, n in sorted(results.close_codes.items()))
    print(
        f"  1. SIGTERM -> exit: {results.exit_seconds:.2f} s (exit code {results.exit_code}; sockets closed: "
        f"{codes}; runs journaled at exit: {results.journaled_at_stop})   target <= {TARGET_EXIT:g} s: "
        f"{verdict(results.exit_seconds <= TARGET_EXIT)}"
    )
    print("     where it went (server log): " + "; ".join(f"{what} {took:.2f} s" for what, took in results.stop_steps))
    if results.carried is not None and results.carried_seconds is not None:
        n, m, x = results.carried
        print(
            f"  2. start -> every run re-attached (the log line): {results.carried_seconds:.2f} s; /healthz: "
            f"{results.up_seconds:.2f} s; carried on {n}, {m} heard from Hermes within {x:.2f} s   "
            f"target <= {TARGET_REATTACH:g} s: {verdict(results.carried_seconds <= TARGET_REATTACH and n == args.runs)}"
        )
    else:
        print(f"  2. start -> /healthz: {results.up_seconds:.2f} s; NO re-attach log line   target: NOT MET")
    unfinished = f", {results.unfinished} not finished" if results.unfinished else ""
    other = f", ended otherwise: {results.not_completed}" if results.not_completed else ""
    print(
        f"  3. text lost / repeated: {results.lost} / {results.repeated} characters over {args.runs} runs "
        f"({results.frames} texts checked: {results.not_prefix} not a prefix of the answer, {results.shorter} "
        f"shorter than the last; message.complete: {results.bad_completes} not the answer, {results.no_complete} "
        f"runs without one{unfinished}{other})   target 0 / 0: "
        f"{verdict(results.lost == results.repeated == 0 and not results.not_prefix and not results.shorter)}"
    )
    if UNREADABLE:
        print(f"     {len(UNREADABLE)} frames not understood, the first: {UNREADABLE[0][:300]}")
    failed = f", {len(results.storm_failures)} failed ({results.storm_failures[0]})" if results.storm_failures else ""
    print(
        f"  4. reconnect storm, {args.clients} clients at once (connect + hello + conversation.open of "
        f"{PAGE}): p50 {ms(results.storm, 50)} ms, p99 {ms(results.storm, 99)} ms, all in "
        f"{results.storm_total:.2f} s (connect -> ready: p50 {ms(results.storm_ready, 50)} ms, p99 "
        f"{ms(results.storm_ready, 99)} ms){failed}"
    )
    for index, (what, took, size, limit) in enumerate(results.opens):
        target = ""
        if index == 0:
            met = took <= TARGET_OPEN_MS and size <= TARGET_OPEN_BYTES
            target = f"   target <= {TARGET_OPEN_MS:g} ms, <= {TARGET_OPEN_BYTES // 1000} KB: {verdict(met)}"
        label = "5." if index == 0 else "  "
        print(
            f"  {label} conversation.open of the {args.messages:,}-message conversation (opened before the stop), "
            f"the {what} after the restart, a page of {limit}: {took:.1f} ms, {size / 1000:.1f} KB{target}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="active runs at the stop")
    parser.add_argument("--accounts", type=int, default=50, help="accounts the runs and clients are spread over")
    parser.add_argument("--clients", type=int, default=1000, help="authenticated sockets (at most 30 an account)")
    parser.add_argument("--messages", type=int, default=10_000, help="messages of the long conversations")
    parser.add_argument("--words", type=int, default=100, help="words of each run's answer")
    parser.add_argument("--delta-delay", type=float, default=0.5, help="seconds between two words of an answer")
    parser.add_argument("--keep", action="store_true", help="keep the data dir and logs (path printed)")
    args = parser.parse_args()
    if args.clients < args.accounts or args.clients > 30 * args.accounts or args.runs < 1:
        parser.error("each account needs at least one client and holds at most 30; and at least one run")
    raise_nofile_limit()
    root = Path(tempfile.mkdtemp(prefix="pheby-bench-restart-"))
    results = Results()
    started: list[Any] = []
    try:
        asyncio.run(bench(args, root, results, started))
    finally:
        for process in reversed(started):
            process.stop()
        if args.keep:
            print(f"data dir and logs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    report(args, results)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--demo-child":
        demo_child(sys.argv[2])
    else:
        sys.exit(main())

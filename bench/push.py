"""Benchmark Web Push: from Hermes's approval event to the push service holding the encrypted message.

Run: `.venv/bin/python bench/push.py [--rounds N] [--subscriptions 1,20] [--delta-delay S]`

The demo Hermes and the server run in processes of their own (`bench.support`), the server allowed to
push to 127.0.0.1 (`push_allow_hosts`, what PHEBY_PUSH_ALLOW_HOSTS=127.0.0.1 sets; the server child
takes its settings from flags only). The loopback push service of the tests (`tests/push_service.py`)
runs in this process: it is told the server's VAPID key (`GET /api/push/config`) and subject
(`pheby.push.vapid.subject_of`), so every push is checked (VAPID signature and claims, headers) and
decrypted with the subscription's keys, as a browser's push service does; one refused fails the bench.
All on loopback, over plain http (no TLS). The push service counts the connections it accepts
(conn/push: the server keeps its connections to a push service alive).

The account gets the case's subscriptions (`POST /api/push/subscriptions`, all events: 1, then 19 more
for 20), and one WebSocket client of the owner says `presence.set` background. A round: a new
conversation, `chat.send` `/demo approve`, then
- latency: from the arrival of the server's `approval.request` frame at the client to the push service
  having read the head of the `approval` push to each subscription (`Received.time`; both are
  `time.monotonic()` in this process). The frame is the closest observable point to Hermes's approval
  event: the server broadcasts it to the account's connections and queues the push in the same step
  (`Hub.broadcast`, then its listeners), so this is the time from the server's broadcast to the push
  service's receipt. Reported to the first and to the last subscription of the round, p50 / p99
  (nearest rank, as in the other benches: of 100 rounds, p99 is the slowest).
- then `approval.respond` deny, `run.finished`, and the `dismiss` push each subscription gets once the
  pushed decision is resolved (waited for; not a latency sample, but a push delivered).
Each such round is paired with the same round in the foreground (`presence.set` foreground: nothing is
pushed, which the bench checks). Server CPU per push = (server process CPU over the pushed rounds -
over the foreground rounds - the idle server's CPU rate times the extra wall time of the pushed rounds)
/ pushes delivered, approvals and dismisses both: what pushing costs the server, the run's own work
taken off (psutil's CPU times are in 10 ms ticks: the sums over 100 rounds make it hold to ~0.3 ms per
push at 1 subscription). The idle rate is measured for a few seconds before the client connects. Also
printed: the pushed rounds' whole CPU per push (the run included); the same difference for this
process, which is mostly the push service checking and decrypting (its threads share this process's
GIL with the client, so at 20 subscriptions the last receipts include some of its own queueing); and
the server's `encrypt` and VAPID signature of one push, timed here. Two warm-up pairs per case are
left out.
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
import timeit
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import psutil
from cryptography.hazmat.primitives.asymmetric import ec
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.support import DemoChild, ServerChild, free_port
from bench.ws_stream import SECRET, percentile
from pheby.push.notices import Notice
from pheby.push.sender import encode_payload, encrypt
from pheby.push.subscriptions import StoredSubscription
from pheby.push.vapid import VapidIdentity, b64url_decode, subject_of
from pheby.settings import load_settings
from tests.push_service import BrowserSubscription, PushService

API_KEY: Final = "bench-demo-key-0123456789abcdef"
PUSH_HOST: Final = "127.0.0.1"
TARGET_P99_MS: Final = 200.0
TIMEOUT: Final = 30.0  # any one wait
POLL_SECONDS: Final = 0.005  # how often the push service's records are looked at
IDLE_SECONDS: Final = 5.0  # how long the server is watched with nothing to do
WARM_PAIRS: Final = 2

Frame = dict[str, Any]
Payload = dict[str, Any]


# --- a lean Pheby client: stamps each frame's arrival before anything else --------------------------


class Client:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.frames: list[tuple[float, Frame]] = []  # time.monotonic() of arrival, frame
        self.changed = asyncio.Event()
        self._ids = 0
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, url: str) -> "Client":
        ws = await connect(url, max_size=None, open_timeout=TIMEOUT)
        await ws.send(json.dumps({"type": "hello", "request_id": "h", "secret": SECRET, "protocol_version": 1}))
        if json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))["type"] != "ready":
            await ws.close()
            raise RuntimeError("hello failed")
        return cls(ws)

    async def _read(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for raw in self.ws:
                arrived = time.monotonic()
                self.frames.append((arrived, json.loads(raw)))
                self.changed.set()

    async def send(self, type_: str, **fields: Any) -> None:
        self._ids += 1
        await self.ws.send(json.dumps({"type": type_, "request_id": f"r{self._ids}", **fields}))

    async def wait_for(self, type_: str, start: int, **match: Any) -> tuple[float, Frame]:
        """The first frame from index `start` on of this type with these fields (an error frame raises)."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            self.changed.clear()
            for arrived, frame in self.frames[start:]:
                if frame["type"] == "error":
                    raise RuntimeError(f"error frame: {frame}")
                if frame["type"] == type_ and all(frame.get(k) == v for k, v in match.items()):
                    return arrived, frame
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 1.0)
        raise RuntimeError(f"no {type_} {match} within {TIMEOUT:g} s")

    async def presence(self, state: str) -> None:
        start = len(self.frames)
        await self.send("presence.set", state=state)
        await self.wait_for("presence.state", start, state=state)

    async def close(self) -> None:
        await self.ws.close()
        await asyncio.wait_for(self._reader, TIMEOUT)


# --- the rounds -----------------------------------------------------------------------------------


@dataclass
class Round:
    cpu: float  # server process CPU seconds over the round
    own_cpu: float  # this process's (the client and the push service)
    seconds: float  # wall time of the round
    pushes: int = 0  # approvals and dismisses delivered
    connections: int = 0  # the push service accepted
    first: float = 0.0  # approval.request at the client -> the first subscription's receipt (s)
    last: float = 0.0  # ... the last subscription's
    unexpected: int = 0  # pushes that arrived in a foreground round


def cpu_of(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


async def receipts(
    subscriptions: Sequence[BrowserSubscription], marks: Sequence[int], wanted: Callable[[Payload], bool]
) -> list[float]:
    """Wait (bounded) until every subscription has a push since its mark that `wanted` takes; their receipt times."""
    deadline = time.monotonic() + TIMEOUT
    found: dict[int, float] = {}
    while len(found) < len(subscriptions):
        for index, (subscription, mark) in enumerate(zip(subscriptions, marks, strict=True)):
            if index not in found:
                hit = next((r.time for r in subscription.received[mark:] if wanted(r.payload)), None)
                if hit is not None:
                    found[index] = hit
        if len(found) == len(subscriptions):
            break
        if time.monotonic() > deadline:
            refused = [f"{r.status} {r.reason}" for s in subscriptions for r in s.rejections]
            raise RuntimeError(
                f"{len(found)} of {len(subscriptions)} subscriptions got the push within {TIMEOUT:g} s; "
                f"refused: {refused or 'none'}"
            )
        await asyncio.sleep(POLL_SECONDS)
    return [found[index] for index in range(len(subscriptions))]


async def one_round(
    client: Client,
    subscriptions: Sequence[BrowserSubscription],
    server: psutil.Process,
    service: PushService,
    *,
    pushed: bool,
) -> Round:
    """One `/demo approve` run, denied; with `pushed`, the client is in the background and the pushes are timed."""
    me = psutil.Process()
    marks = [len(s.received) for s in subscriptions]
    connections, cpu, own_cpu, began = service.connections_accepted, cpu_of(server), cpu_of(me), time.monotonic()
    start = len(client.frames)
    await client.send("conversation.create", name="bench push")
    _, created = await client.wait_for("conversation.created", start)
    conversation_id = created["conversation_id"]
    await client.send("chat.send", conversation_id=conversation_id, text="/demo approve")
    asked, request = await client.wait_for("approval.request", start, conversation_id=conversation_id)
    approval_id = request["approval_id"]
    times: list[float] = []
    if pushed:
        times = await receipts(
            subscriptions, marks, lambda p: p["type"] == "approval" and p.get("approval_id") == approval_id
        )
    await client.send("approval.respond", approval_id=approval_id, choice="deny")
    await client.wait_for("approval.resolved", start, approval_id=approval_id)
    await client.wait_for("run.finished", start, conversation_id=conversation_id)
    if pushed:
        tag = f"approval-{approval_id}"
        await receipts(subscriptions, marks, lambda p: p["type"] == "dismiss" and p.get("tag") == tag)
    result = Round(
        cpu=cpu_of(server) - cpu,
        own_cpu=cpu_of(me) - own_cpu,
        seconds=time.monotonic() - began,
        connections=service.connections_accepted - connections,
    )
    delivered = sum(len(s.received) - mark for s, mark in zip(subscriptions, marks, strict=True))
    if pushed:
        result.pushes = delivered
        result.first, result.last = min(times) - asked, max(times) - asked
    else:
        result.unexpected = delivered
    return result


@dataclass
class Case:
    subscriptions: int
    pushed: list[Round] = field(default_factory=list)
    foreground: list[Round] = field(default_factory=list)

    @property
    def pushes(self) -> int:
        return sum(r.pushes for r in self.pushed)

    def per_push(self, idle_rate: float) -> tuple[float, float, float]:
        """Server CPU s per push (pushed - foreground rounds, idle-corrected), whole pushed rounds', this process's."""
        extra_wall = sum(r.seconds for r in self.pushed) - sum(r.seconds for r in self.foreground)
        server = sum(r.cpu for r in self.pushed) - sum(r.cpu for r in self.foreground) - idle_rate * extra_wall
        own = sum(r.own_cpu for r in self.pushed) - sum(r.own_cpu for r in self.foreground)
        return server / self.pushes, sum(r.cpu for r in self.pushed) / self.pushes, own / self.pushes


async def subscribe(http: httpx.AsyncClient, service: PushService) -> BrowserSubscription:
    subscription = service.subscribe()
    made = await http.post("/api/push/subscriptions", json=subscription.to_json())
    if made.status_code != 201:
        raise RuntimeError(f"subscribing failed: {made.status_code} {made.text}")
    return subscription


@dataclass
class Results:
    cases: list[Case]
    idle_rate: float  # the idle server's CPU seconds a second
    encrypting: float  # seconds per push of the server's encrypt, timed in this process
    signing: float  # ... of its VAPID Authorization
    listen_overflows: int | None  # the kernel's count over the rounds (the whole machine's); None: unknown


async def bench(args: argparse.Namespace, server: ServerChild, service: PushService, subject: str) -> Results:
    process = psutil.Process(server.pid)
    headers = {"Authorization": f"Bearer {SECRET}"}
    async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=TIMEOUT, trust_env=False) as http:
        config = await http.get("/api/push/config")
        config.raise_for_status()
        service.expect_vapid(config.json()["vapid_public_key"], subject)
        before = cpu_of(process)
        await asyncio.sleep(IDLE_SECONDS)
        idle_rate = (cpu_of(process) - before) / IDLE_SECONDS
        overflows = listen_overflows()
        client = await Client.open(server.base_url.replace("http://", "ws://", 1) + "/ws")
        subscriptions: list[BrowserSubscription] = []
        cases: list[Case] = []
        try:
            for count in args.subscriptions:
                while len(subscriptions) < count:
                    subscriptions.append(await subscribe(http, service))
                case = Case(count)
                for pair in range(WARM_PAIRS + args.rounds):
                    await client.presence("background")
                    pushed = await one_round(client, subscriptions, process, service, pushed=True)
                    await client.presence("foreground")
                    foreground = await one_round(client, subscriptions, process, service, pushed=False)
                    if pair >= WARM_PAIRS:
                        case.pushed.append(pushed)
                        case.foreground.append(foreground)
                cases.append(case)
        finally:
            await client.close()
        overflows_after = listen_overflows()
    if service.rejections:
        raise RuntimeError(f"the push service refused {len(service.rejections)} pushes: {service.rejections[0]}")
    approval = next(r.payload for r in subscriptions[0].received if r.payload["type"] == "approval")
    encrypting, signing = crypto_costs(subscriptions[0], approval, subject)
    overflowed = None if overflows is None or overflows_after is None else overflows_after - overflows
    return Results(cases, idle_rate, encrypting, signing, overflowed)


def listen_overflows() -> int | None:
    """The kernel's count of connections dropped on a full listen queue, any socket of the machine (Linux)."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return None
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:") and values.startswith("TcpExt:"):
            table = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            return int(table["ListenOverflows"]) if "ListenOverflows" in table else None
    return None


def crypto_costs(subscription: BrowserSubscription, payload: Payload, subject: str) -> tuple[float, float]:
    """Seconds per push, in this process, of the server's own `encrypt` and VAPID `authorization` (informational)."""
    keys = subscription.to_json()["keys"]
    stored = StoredSubscription(
        "bench", "bench", subscription.endpoint, b64url_decode(keys["p256dh"]), b64url_decode(keys["auth"]), frozenset()
    )
    body = encode_payload(Notice("bench", "approval", payload, 900, "high"))
    identity = VapidIdentity(ec.generate_private_key(ec.SECP256R1()), subject)
    runs = 200
    encrypting = min(timeit.repeat(lambda: encrypt(body, stored), number=runs, repeat=3)) / runs
    signing = min(timeit.repeat(lambda: identity.authorization(stored.endpoint), number=runs, repeat=3)) / runs
    return encrypting, signing


# --- the report --------------------------------------------------------------------------------------


def report(results: Results, args: argparse.Namespace) -> None:
    ms = 1000.0
    cases, idle_rate = results.cases, results.idle_rate
    print(
        f"Web Push, approval.request at the client -> the push service's receipt of the encrypted push, in ms; "
        f"{args.rounds} rounds per case (each paired with one in the foreground); loopback, http"
    )
    print(
        f"{'subscriptions':>13}{'pushes':>8}{'first p50':>11}{'first p99':>11}{'last p50':>10}{'last p99':>10}"
        f"{'CPU/push':>10}{'round CPU/push':>16}{'bench CPU/push':>16}{'conn/push':>11}"
    )
    figures: dict[int, tuple[float, float, float, float, float]] = {}
    for case in cases:
        first = [r.first for r in case.pushed]
        last = [r.last for r in case.pushed]
        f50, f99 = percentile(first, 50) * ms, percentile(first, 99) * ms
        l50, l99 = percentile(last, 50) * ms, percentile(last, 99) * ms
        server, whole, own = (x * ms for x in case.per_push(idle_rate))
        figures[case.subscriptions] = (f50, f99, l50, l99, server)
        print(
            f"{case.subscriptions:>13}{case.pushes:>8}{f50:>11.1f}{f99:>11.1f}{l50:>10.1f}{l99:>10.1f}"
            f"{server:>10.2f}{whole:>16.2f}{own:>16.2f}"
            f"{sum(r.connections for r in case.pushed) / case.pushes:>11.2f}"
        )
        unexpected = sum(r.unexpected for r in case.foreground)
        if unexpected:
            print(f"WARNING: {unexpected} pushes arrived while the client was in the foreground")
    print(
        "CPU/push: server process CPU of the pushed rounds minus the foreground rounds (idle-corrected), per push "
        "delivered (each round: one approval and one dismiss per subscription); round CPU/push: the pushed rounds' "
        "whole server CPU per push, the run included; bench CPU/push: the same difference for this process "
        "(the push service checking and decrypting, mostly); conn/push: connections the push service accepted "
        "per push (1.00: the server kept none alive)"
    )
    print(
        f"informational: the idle server spends {idle_rate * ms:.1f} ms of CPU a second; "
        f"median pushed round {statistics.median(r.seconds for c in cases for r in c.pushed) * ms:.0f} ms, "
        f"foreground round {statistics.median(r.seconds for c in cases for r in c.foreground) * ms:.0f} ms; "
        f"the server's encrypt / VAPID signature of one push, timed in this process: "
        f"{results.encrypting * ms:.2f} / {results.signing * ms:.2f} ms"
    )
    if results.listen_overflows:
        print(
            f"WARNING: the kernel dropped {results.listen_overflows} connections on a full listen queue during the "
            "rounds (counted for the whole machine): pushes may have waited a SYN-ACK retransmission (1 s)"
        )
    for count, (_, _, _, l99, _) in figures.items():
        verdict = "met" if l99 <= TARGET_P99_MS else "NOT met"
        print(f"target: p99 <= {TARGET_P99_MS:g} ms on loopback, {count} subs, last: {verdict} ({l99:.1f} ms)")
    parts = []
    for count, (f50, f99, l50, l99, _) in figures.items():
        if count == 1:
            parts.append(f"1 sub: {f50:.1f} / {f99:.1f} ms")
        else:
            parts.append(f"{count} subs (first): {f50:.1f} / {f99:.1f} ms, (last): {l50:.1f} / {l99:.1f} ms")
    cpu = " / ".join(f"{figures[count][4]:.2f}" for count in figures)
    counts = " / ".join(str(count) for count in figures)
    print(f"push latency p50/p99 {'; '.join(parts)}; server CPU per push ({counts} subs): {cpu} ms")


def subscription_counts(text: str) -> list[int]:
    counts = [int(part) for part in text.split(",") if part.strip()]
    if not counts or counts != sorted(counts) or not all(1 <= c <= 20 for c in counts):
        raise argparse.ArgumentTypeError("ascending counts from 1 to 20 (an account holds at most 20)")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100, help="measured rounds per case")
    parser.add_argument(
        "--subscriptions", type=subscription_counts, default=[1, 20], help="the cases: subscriptions on the account"
    )
    parser.add_argument("--delta-delay", type=float, default=0.001, help="the demo Hermes's delta pacing")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    with tempfile.TemporaryDirectory(prefix="pheby-bench-") as tmp:
        demo = DemoChild(API_KEY, Path(tmp) / "demo.log", delta_delay=args.delta_delay)
        server: ServerChild | None = None
        service = PushService()
        try:
            flags = demo.server_flags(Path(tmp) / "data", free_port(), SECRET, push_allow_hosts=[PUSH_HOST])
            subject = subject_of(load_settings({}, **flags))  # what the server signs with
            server = ServerChild(flags, Path(tmp) / "server.log")
            service.start()
            results = asyncio.run(bench(args, server, service, subject))
        finally:
            service.stop()
            if server is not None:
                server.stop()
            demo.stop()
    report(results, args)


if __name__ == "__main__":
    main()

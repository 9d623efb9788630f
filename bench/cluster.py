"""Benchmark the latency the cross-process hop adds to a run's text (`pheby.cluster`).

Run: `.venv/bin/python bench/cluster.py [--runs N] [--words N] [--pace-ms MS] [--receivers N]`

A throwaway PostgreSQL 15 and Redis 7 (`tests/postgres_server.py`, `tests/redis_server.py`) and one
migrated database. This process is the run's owner: a `ClusterHub` (both windows 0, so every delta is
forwarded and the hop is measured alone) with one append connection of the account, as Pheby Web asks.
Each receiver is a process of its own (`--receiver`) with its own pool, bell and `ClusterHub`, and one
append connection of the same account. The owner streams `--runs` concurrent runs, each a
`message.start` (logged), `--words` deltas `--pace-ms` apart (one word each), a `message.complete` and a
`run.finished`. Each word carries the time it was broadcast (`time.monotonic`: one clock for every
process on the machine); a connection's latency for a frame is its arrival minus the broadcast time of
the newest word in it. First the same runs stream in one process with no cluster (`CoalescingHub`,
windows 0: the baseline). Printed, from one run: p50 / p99 of the baseline, at the owner's own
connection and at the receivers', and what the hop adds (receivers minus baseline; target p99 ≤ 10 ms
more), with the number of frames each got (fewer at the receivers when the outbox merged deltas that
piled up).
"""

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from pheby.cluster import ClusterHub
from pheby.db.postgres import PostgresDatabase
from pheby.events import EventLog, RedisBell
from pheby.protocol.coalesce import CoalescingHub
from pheby.protocol.frames import MessageComplete, MessageDelta, MessageStart, RunFinished
from pheby.protocol.hub import Connection

ACCOUNT = "bench"
PREFIX = "bench:"


class Latencies:
    """A connection whose socket notes, for each text frame, arrival minus the newest word's broadcast time."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.ends = 0

    async def send_text(self, text: str) -> None:
        now = time.monotonic()
        frame = json.loads(text)
        if frame.get("type") == "run.finished":
            self.ends += 1
        appended = frame.get("append") if frame.get("type") == "message.delta" else None
        if not appended:
            return
        newest = appended.rstrip().rsplit(" ", 1)[-1]
        _, _, stamp = newest.partition("@")
        with contextlib.suppress(ValueError):
            self.seconds.append(now - float(stamp))

    async def close(self, code: int, reason: str) -> None:
        return None


@contextlib.asynccontextmanager
async def cluster_hub(database_url: str, redis_url: str) -> AsyncIterator[tuple[ClusterHub, Latencies]]:
    db = PostgresDatabase(database_url, pool_size=4)
    await db.open()
    bell = RedisBell(redis_url, prefix=PREFIX)
    hub = ClusterHub(log=EventLog(db, bell), delta_window_seconds=0, append_window_seconds=0)
    await hub.start()
    latencies = Latencies()
    connection = Connection(ACCOUNT, latencies.send_text, latencies.close, delta_append=True)
    hub.add(connection)
    connection.start()
    try:
        for _ in range(200):  # up to 10 s for the bell's first connection
            if bell.connected:
                break
            await asyncio.sleep(0.05)
        await hub.joined(ACCOUNT)
        yield hub, latencies
    finally:
        hub.remove(connection)
        await connection.drain_and_stop()
        await hub.aclose()
        await bell.aclose()
        await db.close()


async def receive(database_url: str, redis_url: str, runs: int) -> None:
    """A receiver process: say ready, hold the connection until every run has ended, print the latencies."""
    async with cluster_hub(database_url, redis_url) as (_, latencies):
        print("ready", flush=True)
        deadline = time.monotonic() + 600
        while latencies.ends < runs and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
    print(json.dumps(latencies.seconds), flush=True)


async def single_process(args: argparse.Namespace) -> list[float]:
    """The baseline: the same runs through one process's hub, no cluster."""
    hub = CoalescingHub(delta_window_seconds=0, append_window_seconds=0)
    latencies = Latencies()
    connection = Connection(ACCOUNT, latencies.send_text, latencies.close, delta_append=True)
    hub.add(connection)
    connection.start()
    await asyncio.gather(*(stream(hub, run, args.words, args.pace_ms / 1000) for run in range(args.runs)))
    await connection.drain_and_stop()
    return latencies.seconds


async def stream(hub: CoalescingHub, run: int, words: int, pace: float) -> None:
    conversation_id, message_id, run_id = f"c{run}", f"m{run}", f"r{run}"
    hub.broadcast(ACCOUNT, MessageStart(conversation_id=conversation_id, run_id=run_id, message_id=message_id))
    text = ""
    for n in range(words):
        await asyncio.sleep(pace)
        text += f"w{n}@{time.monotonic():.6f} "
        hub.broadcast(ACCOUNT, MessageDelta(conversation_id=conversation_id, message_id=message_id, text=text))
    hub.broadcast(ACCOUNT, MessageComplete(conversation_id=conversation_id, message_id=message_id, text=text))
    hub.broadcast(ACCOUNT, RunFinished(conversation_id=conversation_id, run_id=run_id, status="completed"))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


@contextlib.contextmanager
def services() -> Iterator[tuple[str, str]]:
    from tests.postgres_server import PostgresServer, fresh_database
    from tests.redis_server import RedisServer

    postgres = PostgresServer()  # started, on free loopback ports
    try:
        redis = RedisServer()
        try:
            with fresh_database(postgres.url) as database_url:
                yield database_url, redis.url
        finally:
            redis.close()
    finally:
        postgres.close()


async def owner(args: argparse.Namespace, database_url: str, redis_url: str) -> None:
    db = PostgresDatabase(database_url, pool_size=2)
    await db.open()  # migrated here, once
    await db.transaction(
        lambda c: c.execute(
            "INSERT INTO accounts (id, name, is_owner, created_at) VALUES (?, ?, ?, ?)", (ACCOUNT, ACCOUNT, False, 1.0)
        )
    )
    await db.close()
    baseline = await single_process(args)
    command = [sys.executable, __file__, "--receiver", database_url, redis_url, str(args.runs)]
    receivers = [
        subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=os.environ | {"PYTHONUNBUFFERED": "1"})
        for _ in range(args.receivers)
    ]
    try:
        for receiver in receivers:
            assert receiver.stdout is not None
            if receiver.stdout.readline().strip() != "ready":
                raise SystemExit("a receiver did not start")
        async with cluster_hub(database_url, redis_url) as (hub, local):
            await asyncio.gather(*(stream(hub, run, args.words, args.pace_ms / 1000) for run in range(args.runs)))
            await hub.settled(ACCOUNT)
            await asyncio.sleep(0.2)
        remote: list[float] = []
        for receiver in receivers:
            out, _ = receiver.communicate(timeout=120)
            remote += json.loads(out.strip().splitlines()[-1])
    finally:
        for receiver in receivers:
            if receiver.poll() is None:
                receiver.kill()
                receiver.wait()
    report(args, baseline, local.seconds, remote)


def report(args: argparse.Namespace, baseline: list[float], local: list[float], remote: list[float]) -> None:
    ms = 1000.0
    print(
        f"{args.runs} runs x {args.words} words, {args.pace_ms} ms apart; owner + {args.receivers} receiver process(es)"
    )
    for name, values in (
        ("one process, no cluster", baseline),
        ("cluster: the owner's connection", local),
        ("cluster: the receivers' connections", remote),
    ):
        print(
            f"{name}: {len(values)} frames, p50 {percentile(values, 0.5) * ms:.2f} ms, "
            f"p99 {percentile(values, 0.99) * ms:.2f} ms"
        )
    print(
        "added by the hop (receivers - one process): p50 "
        f"{(percentile(remote, 0.5) - percentile(baseline, 0.5)) * ms:.2f} ms, p99 "
        f"{(percentile(remote, 0.99) - percentile(baseline, 0.99)) * ms:.2f} ms (target: p99 <= 10 ms more)"
    )


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--receiver":
        asyncio.run(receive(sys.argv[2], sys.argv[3], int(sys.argv[4])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--words", type=int, default=300)
    parser.add_argument("--pace-ms", type=float, default=10.0)
    parser.add_argument("--receivers", type=int, default=2)
    args: Any = parser.parse_args()
    with services() as (database_url, redis_url):
        asyncio.run(owner(args, database_url, redis_url))


if __name__ == "__main__":
    main()

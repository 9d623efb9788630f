"""Benchmark the database's own cost per call: what `Database.run` and `Database.transaction` add to the
statements they carry, on PostgreSQL, as a multiple of one round trip to the server.

Run: `.venv/bin/python bench/database_calls.py [--calls 3000] [--database-url URL]`: on a throwaway
PostgreSQL server (`tests/postgres_server.py`), or in a new database on the server of `--database-url`.

Printed, from one run, each a median over `--calls` calls made from the event loop as the stores make them,
interleaved in rounds so the machine's drift falls on all of them alike:
- one round trip: `SELECT 1` on a plain psycopg connection of this thread (the unit);
- `run`: one `SELECT 1` through `PostgresDatabase.run` (a pooled connection on a worker thread);
- `transaction`: one `INSERT` through `PostgresDatabase.transaction` (with the write lock every
  transaction takes, and its commit).
A `run` is its statement's round trip plus the hop to a worker thread and back; a `transaction` is three
round trips (its start with the lock, the statement, the commit) and the hop.
"""

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Final

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from pheby.db import Database, open_database

ROUND: Final = 100  # calls of one kind in a row, before the next kind's


@contextlib.contextmanager
def database(url: str) -> Iterator[str]:
    """A new database on the server of `url`, or on a throwaway server if `url` is empty; dropped after."""
    from tests.postgres_server import PostgresServer, fresh_database

    server = None if url else PostgresServer()
    try:
        with fresh_database(server.url if server is not None else url) as database_url:
            yield database_url
    finally:
        if server is not None:
            server.close()


async def timed(call: Callable[[], Awaitable[object]], times: list[float]) -> None:
    for _ in range(ROUND):
        started = time.perf_counter()
        await call()
        times.append(time.perf_counter() - started)


async def measure(url: str, calls: int) -> dict[str, float]:
    db: Database = open_database(url, Path("unused"))
    await db.open()
    try:
        await db.run(lambda c: c.execute("CREATE TABLE bench_rows (id BIGSERIAL PRIMARY KEY, value TEXT)"))
        with psycopg.connect(url, autocommit=True, cursor_factory=psycopg.ClientCursor) as plain:

            async def round_trip() -> None:
                plain.execute("SELECT 1").fetchone()

            kinds: dict[str, Callable[[], Awaitable[object]]] = {
                "one round trip": round_trip,
                "run": lambda: db.run(lambda c: c.execute("SELECT 1").fetchone()),
                "transaction": lambda: db.transaction(
                    lambda c: c.execute("INSERT INTO bench_rows (value) VALUES (?)", ("a row",))
                ),
            }
            times: dict[str, list[float]] = {kind: [] for kind in kinds}
            for call in kinds.values():  # warm: the pool's connections made, the statements planned once
                await timed(call, [])
            for _ in range(max(1, calls // ROUND)):
                for kind, call in kinds.items():
                    await timed(call, times[kind])
    finally:
        await db.close()
    return {kind: statistics.median(values) for kind, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()
    with database(args.database_url) as url:
        medians = asyncio.run(measure(url, args.calls))
    unit = medians["one round trip"]
    for kind, median in medians.items():
        print(f"{kind:>15}: median {median * 1e6:6.0f} µs, {median / unit:.2f}x one round trip")


if __name__ == "__main__":
    main()

"""A rolling restart of three `pheby serve` processes under load, on one PostgreSQL and one Redis.

Run: `.venv/bin/python bench/rolling_restart.py [--runs 12] [--clients-per-run 2] [--ticks 400]`

On loopback: a throwaway PostgreSQL 15 and Redis 7 (`tests/postgres_server.py`, `tests/redis_server.py`),
the demo Hermes in a process of its own as a 0.22-era gateway (`--replay`: numbered events), three
`pheby serve` processes sharing the database, Redis and a data dir (`PHEBY_RUN_LEASE_SECONDS=3`), and the
clients here (`tests.ws_client.PhebyClient`, the owner's secret). `--runs` runs (`/demo slow --ticks`, a
tick every 50 ms), each started through the processes in turn and watched by `--clients-per-run` sockets
spread over them; a writer renames the conversations one after another, as fast as the renames are
acknowledged.

Once every run streams, each process in turn gets SIGTERM; the sockets it held reconnect at once to the other
two (as through a load balancer) and open their conversation; then a replacement is started and the
next one goes. Printed, from one run:
- SIGTERM -> exit, per process (it hands its runs over and closes its sockets with 1012);
- reconnect -> recovered: from a socket's close to its conversation's snapshot on another process,
  p50 / p99 over the sockets of the stopped processes;
- renames acknowledged, and acknowledged ones lost (target 0);
- runs that ended with the agent's whole answer (target all), `run.finished` logged twice for a run
  (target 0), and how many runs a process took over from one that stopped.
"""

import argparse
import asyncio
import contextlib
import itertools
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.cluster import services
from bench.support import free_port
from bench.ws_stream import percentile
from tests.crash_safety import SECRET, ServerProcess
from tests.demo_hermes_process import DemoHermesProcess
from tests.ws_client import PhebyClient


class Watcher:
    """A socket watching one run's conversation; it follows its process's stop to the next process."""

    def __init__(self, server: int, conversation_id: str, client: PhebyClient) -> None:
        self.server = server
        self.conversation_id = conversation_id
        self.client = client


async def bench(args: argparse.Namespace, database_url: str, redis_url: str, work: Path) -> None:
    import psycopg

    hermes = DemoHermesProcess(work / "demo-hermes.log", "--delta-delay", "0.01", "--replay").start()
    env = {
        "HERMES_URL": hermes.base_url,
        "HERMES_API_KEY": hermes.api_key,
        "PHEBY_DATABASE_URL": database_url,
        "PHEBY_REDIS_URL": redis_url,
        "PHEBY_RUN_LEASE_SECONDS": "3",
    }
    count = itertools.count(1)

    async def start() -> ServerProcess:
        server = ServerProcess(work / "data", free_port(), work / f"server-{next(count)}.log", env)
        await server.wait_up()
        return server

    servers = [await start()]  # the first migrates the database
    servers += [await start(), await start()]
    everyone: list[ServerProcess] = list(servers)
    watchers: list[Watcher] = []
    runs: list[tuple[str, str]] = []
    try:
        for index in range(args.runs):
            starter = await PhebyClient.connect(servers[index % 3].ws_url, SECRET)
            created = await starter.request("conversation.create", "conversation.created", name=f"run {index}")
            accepted = await starter.request(
                "chat.send",
                "run.accepted",
                30,
                conversation_id=created["conversation_id"],
                text=f"/demo slow {args.ticks}",
            )
            runs.append((created["conversation_id"], accepted["run_id"]))
            watchers.append(Watcher(index % 3, created["conversation_id"], starter))
            for extra in range(1, args.clients_per_run):
                where = (index + extra) % 3
                client = await PhebyClient.connect(servers[where].ws_url, SECRET)
                watchers.append(Watcher(where, created["conversation_id"], client))

        acknowledged: dict[str, str] = {}
        renamed = 0
        writing = True

        async def write() -> None:
            nonlocal renamed
            server = 0
            client = await PhebyClient.connect(servers[server].ws_url, SECRET)
            while writing:
                conversation_id = runs[renamed % len(runs)][0]
                name = f"name {renamed}"
                try:
                    reply = await client.request(
                        "conversation.rename", "conversation.renamed", 10, conversation_id=conversation_id, name=name
                    )
                except Exception:  # its process stopped (1012): on to the next
                    reply = {}
                if reply.get("type") == "conversation.renamed":
                    acknowledged[conversation_id] = name
                    renamed += 1
                elif client.ws.close_code is not None or not reply:
                    server = (server + 1) % 3
                    with contextlib.suppress(Exception):
                        await client.close()
                    client = await PhebyClient.connect(servers[server].ws_url, SECRET)
            await client.close()

        writer = asyncio.create_task(write())
        await asyncio.sleep(1.0)  # every run streams
        connecting = asyncio.Semaphore(6)
        exits: list[float] = []
        recovered: list[float] = []
        for turn in range(3):
            stopping = servers[turn]
            held = [w for w in watchers if w.server == turn]
            began = time.monotonic()
            stopping.process.terminate()
            await stopping.reap()
            exits.append(time.monotonic() - began)
            servers[turn] = await start()  # the replacement; the held sockets go to the next process meanwhile

            async def reconnect(watcher: Watcher, to: int) -> None:
                with contextlib.suppress(Exception):
                    await watcher.client.closed(10)
                closed_at = time.monotonic()
                watcher.server = to
                async with connecting:  # one loopback address: the server lets it hold 8 sockets before hello
                    watcher.client = await PhebyClient.connect(servers[watcher.server].ws_url, SECRET)
                await watcher.client.request(
                    "conversation.open", "conversation.history", 20, conversation_id=watcher.conversation_id
                )
                recovered.append(time.monotonic() - closed_at)

            # Spread over the two other processes, as a load balancer would.
            await asyncio.gather(*(reconnect(w, (turn + 1 + n % 2) % 3) for n, w in enumerate(held)))
            everyone.append(servers[turn])
        writing = False
        await writer

        probe = await PhebyClient.connect(servers[0].ws_url, SECRET)
        ended_whole = 0
        deadline = time.monotonic() + 120
        for conversation_id, _ in runs:
            while True:
                snapshot = await probe.request(
                    "conversation.open", "conversation.history", 20, conversation_id=conversation_id
                )
                if snapshot["run"] is None or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
            answers = [m["text"] for m in snapshot["messages"] if m["role"] == "assistant"]
            ended_whole += answers == ["".join(f"tick {i} " for i in range(args.ticks)).strip()]
        listed = await probe.request("conversation.list", "conversation.snapshot", 20)
        names = {c["conversation_id"]: c["name"] for c in listed["conversations"]}
        lost = sum(names.get(conversation_id) != name for conversation_id, name in acknowledged.items())
        await probe.close()
        with psycopg.connect(database_url) as pg:
            finished = pg.execute("SELECT payload FROM account_events WHERE kind = 'run.finished'").fetchall()
        ends = [str(row[0]) for row in finished]
        twice = sum(sum(run_id in end for end in ends) > 1 for _, run_id in runs)
        handed = sum(s.log().count("took over") for s in everyone)

        print(
            f"runs: {args.runs} ({args.ticks} ticks each), sockets: {len(watchers)}, three processes, restarted in turn"
        )
        print(f"SIGTERM -> exit, per process: {', '.join(f'{s:.2f} s' for s in exits)}")
        print(
            f"reconnect -> recovered (snapshot on another process), {len(recovered)} sockets: "
            f"p50 {percentile(recovered, 50) * 1000:.0f} ms, p99 {percentile(recovered, 99) * 1000:.0f} ms"
        )
        print(f"renames acknowledged: {renamed}; acknowledged and lost: {lost}")
        print(f"runs ended with the whole answer: {ended_whole} of {args.runs}; run.finished logged twice: {twice}")
        print(f"passes of a keeper taking runs over: {handed}")
    finally:
        for watcher in watchers:
            with contextlib.suppress(Exception):
                await watcher.client.close()
        for process in everyone:
            process.stop()
        hermes.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=12)  # one account: a process holds 32 of its sockets
    parser.add_argument("--clients-per-run", type=int, default=2)
    parser.add_argument("--ticks", type=int, default=400)
    args = parser.parse_args()
    with services() as (database_url, redis_url), tempfile.TemporaryDirectory() as work:
        asyncio.run(bench(args, database_url, redis_url, Path(work)))


if __name__ == "__main__":
    main()

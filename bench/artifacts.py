"""Benchmark artifact PATCH and GET through the real server, as a ratio to a Litestar hello world.

Run: `.venv/bin/python bench/artifacts.py [--requests N] [--concurrency C] [--rounds R]`

Two figures per route: requests per elapsed second (what one httpx client gets through), and requests
per second of the server process's CPU time. On a small machine the client saturates before a hello
world does, so the first ratio flatters any slower route; the second is the server's own cost. The
target (>= 0.3 of the hello world) is reported against both.

Each server is uvicorn on loopback with the configuration `pheby serve` uses (`build_uvicorn_config`),
in its own subprocess so the load generator does not share its interpreter. The hello world is served
by that same configuration with only the app swapped. One `httpx.AsyncClient` sends `N` requests per
measurement over `C` connections; each figure is the best of `R` rounds. PATCHes are real edits: every
worker edits its own artifact, always against the revision it just got back, so none is a 409.
"""

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import NamedTuple

import httpx
import psutil
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from litestar import Litestar, get

from bench.support import free_port, stop_process
from handlers.support.app import create_app
from pheby.server import build_uvicorn_config
from pheby.settings import load_settings

TARGET = 0.3
SECRET = "bench-owner-secret-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {SECRET}"}


@get("/hello", sync_to_thread=False)
def hello() -> dict[str, str]:
    return {"hello": "world"}


def serve(app_name: str, port: int, data_dir: Path) -> None:
    """Child process: run one server until terminated."""
    settings = load_settings(
        {},
        port=port,
        data_dir=data_dir,
        secret=SECRET,
        hermes_url="http://127.0.0.1:9",  # never called by these routes; the poller is pushed out of the run
        job_poll_seconds=3600,
        artifact_versions_max=1_000_000,  # the bench edits one artifact per worker thousands of times
    )
    config = build_uvicorn_config(settings, create_app(settings))
    if app_name == "hello":
        config.app = Litestar(route_handlers=[hello])  # same uvicorn settings, only the app differs
    uvicorn.Server(config).run()


class Server:
    def __init__(self, app_name: str, data_dir: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, __file__, "--serve", app_name, "--port", str(self.port), "--dir", str(data_dir)]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    async def ready(self, path: str) -> None:
        deadline = time.monotonic() + 30
        async with httpx.AsyncClient(base_url=self.base_url) as client:
            while True:
                try:
                    if (await client.get(path)).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if self.process.poll() is not None or time.monotonic() > deadline:
                    _, err = self.process.communicate()
                    sys.exit(f"server did not start:\n{err.decode(errors='replace')}")
                await asyncio.sleep(0.05)

    def cpu_seconds(self) -> float:
        times = psutil.Process(self.process.pid).cpu_times()
        return float(times.user + times.system)

    def stop(self) -> None:
        stop_process(self.process)


class Rate(NamedTuple):
    wall: float  # requests per second of elapsed time: bounded by the client as much as by the server
    server_cpu: float  # requests per second of the server process's CPU time: the server's own cost


async def rate(
    server: Server, requests: int, concurrency: int, make_worker: Callable[[int], Callable[[], Awaitable[None]]]
) -> Rate:
    """`requests` calls spread over `concurrency` workers, timed by the clock and by the server's CPU."""
    per_worker = [requests // concurrency + (1 if w < requests % concurrency else 0) for w in range(concurrency)]
    steps = [make_worker(w) for w in range(concurrency)]

    async def run(worker: int) -> None:
        for _ in range(per_worker[worker]):
            await steps[worker]()

    cpu_before, start = server.cpu_seconds(), time.perf_counter()
    await asyncio.gather(*(run(w) for w in range(concurrency)))
    wall, cpu = time.perf_counter() - start, server.cpu_seconds() - cpu_before
    return Rate(requests / wall, requests / cpu)


async def measure_hello(server: Server, requests: int, concurrency: int) -> Rate:
    async with _client(server, concurrency) as client:

        def worker(_: int) -> Callable[[], Awaitable[None]]:
            async def step() -> None:
                _expect((await client.get("/hello")), 200)

            return step

        await rate(server, concurrency * 20, concurrency, worker)  # warm-up
        return await rate(server, requests, concurrency, worker)


async def measure_artifacts(server: Server, requests: int, concurrency: int) -> tuple[Rate, Rate, Rate]:
    async with _client(server, concurrency) as client:
        ids: list[str] = []
        revisions: list[int] = []
        for w in range(concurrency):
            created = await client.post("/api/artifacts", json={"title": f"bench {w}", "content": "# start\n"})
            _expect(created, 201)
            ids.append(created.json()["artifact"]["id"])
            revisions.append(1)
        body = "# Notes\n\n" + "A line of an ordinary document.\n" * 30  # ~1 KiB, a realistic small edit

        def patcher(w: int) -> Callable[[], Awaitable[None]]:
            async def step() -> None:
                response = await client.patch(
                    f"/api/artifacts/{ids[w]}", json={"revision": revisions[w], "content": body}
                )
                _expect(response, 200)
                revisions[w] = response.json()["artifact"]["revision"]

            return step

        def getter(w: int) -> Callable[[], Awaitable[None]]:
            async def step() -> None:
                _expect(await client.get(f"/api/artifacts/{ids[w]}"), 200)

            return step

        def me(_: int) -> Callable[[], Awaitable[None]]:
            async def step() -> None:
                _expect(await client.get("/api/me"), 200)

            return step

        for worker in (patcher, getter, me):  # warm-up
            await rate(server, concurrency * 20, concurrency, worker)
        return (
            await rate(server, requests, concurrency, patcher),
            await rate(server, requests, concurrency, getter),
            await rate(server, requests, concurrency, me),
        )


def _client(server: Server, concurrency: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    return httpx.AsyncClient(base_url=server.base_url, headers=HEADERS, limits=limits, timeout=30)


def _expect(response: httpx.Response, status: int) -> None:
    if response.status_code != status:
        raise RuntimeError(f"{response.request.method} {response.request.url.path}: {response.status_code}")


def _best(rates: list[Rate]) -> Rate:
    return Rate(max(r.wall for r in rates), max(r.server_cpu for r in rates))


async def bench(requests: int, concurrency: int, rounds: int) -> None:
    hello_rates: list[Rate] = []
    patch_rates: list[Rate] = []
    get_rates: list[Rate] = []
    me_rates: list[Rate] = []
    with tempfile.TemporaryDirectory(prefix="pheby-bench-") as tmp:
        for round_ in range(rounds):
            # Alternate the servers, so a noisy moment on a shared machine hurts both alike.
            hello_server = Server("hello", Path(tmp) / "hello")
            try:
                await hello_server.ready("/hello")
                hello_rates.append(await measure_hello(hello_server, requests, concurrency))
            finally:
                hello_server.stop()
            pheby_server = Server("pheby", Path(tmp) / f"pheby-{round_}")
            try:
                await pheby_server.ready("/healthz")
                patch_rate, get_rate, me_rate = await measure_artifacts(pheby_server, requests, concurrency)
            finally:
                pheby_server.stop()
            patch_rates.append(patch_rate)
            get_rates.append(get_rate)
            me_rates.append(me_rate)

    hello_best = _best(hello_rates)
    print(f"{requests} requests per measurement over {concurrency} connections, best of {rounds} rounds")
    print("wall:   requests per elapsed second; the one httpx client is a bottleneck too, which pulls ratios to 1")
    print("server: requests per second of the server process's CPU time (all its threads), the server's own cost")
    print(f"{'route':<36}{'wall req/s':>11}{'ratio':>7}{'server req/s':>14}{'ratio':>7}")
    rows = [
        ("GET /hello (Litestar hello world)", hello_best, False),
        ("GET /api/me (auth only, reference)", _best(me_rates), False),
        ("PATCH /api/artifacts/{id}", _best(patch_rates), True),
        ("GET /api/artifacts/{id}", _best(get_rates), True),
    ]
    for name, best, checked in rows:
        wall_ratio, cpu_ratio = best.wall / hello_best.wall, best.server_cpu / hello_best.server_cpu
        line = f"{name:<36}{best.wall:>11.0f}{wall_ratio:>7.2f}{best.server_cpu:>14.0f}{cpu_ratio:>7.2f}"
        if checked:
            line += f"   >= {TARGET}: wall {_verdict(wall_ratio)}, server {_verdict(cpu_ratio)}"
        print(line)


def _verdict(ratio: float) -> str:
    return "met" if ratio >= TARGET else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", choices=["hello", "pheby"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.dir)
        return
    asyncio.run(bench(args.requests, args.concurrency, args.rounds))


if __name__ == "__main__":
    main()

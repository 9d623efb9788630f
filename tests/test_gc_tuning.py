"""The garbage collector of `pheby serve` (`pheby.gc_tuning`): start-up's objects frozen out of collections and
the thresholds set, once the lifespan's start-up is over; read back from the process's own `/metrics`. And what
runs and connections make is left to no collection: none of it in a reference cycle."""

import asyncio
import gc
from collections.abc import Callable
from pathlib import Path

import pytest

from pheby.gc_tuning import THRESHOLDS
from pheby.settings import Settings
from tests.demo_hermes_process import DemoHermesProcess
from tests.live_server import LiveServer
from tests.polling import until
from tests.server_deployment import Deployment
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]


async def test_pheby_serve_freezes_what_start_up_made_and_sets_the_thresholds(
    tmp_path: Path, make_demo_hermes_process: Callable[..., DemoHermesProcess]
) -> None:
    deployment = Deployment(tmp_path, make_demo_hermes_process())
    try:
        await deployment.start()
        assert await deployment.metric("pheby_gc_frozen_objects") > 10_000  # modules, the app, the services
        thresholds = [await deployment.metric(f'pheby_gc_threshold{{generation="{g}"}}') for g in range(3)]
        assert tuple(thresholds) == THRESHOLDS
    finally:
        await deployment.close()


OWN_MODULES = ("pheby", "handlers", "hermes_client", "storage", "scheduler")


async def streamed_run(client: PhebyClient, name: str) -> None:
    created = await client.request("conversation.create", "conversation.created", name=name)
    text = "/demo say " + " ".join(f"w{i}" for i in range(40))
    accepted = await client.request("chat.send", "run.accepted", conversation_id=created["conversation_id"], text=text)
    await client.arrived("run.finished", 20, run_id=accepted["run_id"])


async def test_runs_and_connections_leave_no_cycles_of_the_servers_own_objects(
    start_live_server: Callable[[Settings], LiveServer], live_settings: Callable[..., Settings]
) -> None:
    """What a run and a connection make is freed by reference counting, not left for the collector's passes,
    whose pauses are what the loop's latency pays for under load (docs/scaling.md). Third-party objects are not
    ours to judge (httpx's streamed responses hold cycles)."""
    server = start_live_server(live_settings())
    async with await PhebyClient.connect(
        server.ws_url, server.secret, features=["delta_append", "delta_packed"]
    ) as client:
        await streamed_run(client, "warm-up")  # what is made once per process, made
        gc.collect()
        gc.disable()
        try:
            for n in range(3):
                async with await PhebyClient.connect(server.ws_url, server.secret) as cumulative:
                    await streamed_run(client if n % 2 else cumulative, f"run {n}")
            await until_settled(server)
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            ours = sorted({f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage if own(o)})
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    assert ours == []


def own(thing: object) -> bool:
    return type(thing).__module__.split(".")[0] in OWN_MODULES


async def until_settled(server: LiveServer) -> None:
    """The closed socket's connection gone from the hub, its writer ended."""
    await until(lambda: server.services.hub.connection_count() == 1, "the closed connection removed")
    await asyncio.sleep(0.2)

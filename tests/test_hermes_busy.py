"""A gateway at its concurrency cap (Hermes allows `max_concurrent_runs`, 10 by default, then answers 429):
the client is told to try again, with the protocol's `rate_limited`, and loses nothing."""

from collections.abc import Callable

import pytest

from demo_hermes import DemoHermesServer
from pheby.settings import Settings
from tests.live_server import LiveServer, hermes_settings
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]


async def test_a_run_past_hermess_concurrency_cap_is_rate_limited_and_can_be_sent_again(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    make_demo_hermes: Callable[..., DemoHermesServer],
) -> None:
    hermes = make_demo_hermes(max_concurrent_runs=1)
    server = start_live_server(live_settings(**hermes_settings(hermes), media_roots=(hermes.media_dir,)))
    async with await PhebyClient.connect(server.ws_url, server.secret) as client:
        first = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
        second = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
        running = await client.request("chat.send", "run.accepted", conversation_id=first, text="/demo slow")

        refused = await client.request("chat.send", "error", conversation_id=second, text="hello")
        assert refused["error"]["code"] == "rate_limited"
        assert "try again" in refused["error"]["message"]
        assert server.services.runs.active(second) is None  # nothing half-started

        await client.send("run.cancel", conversation_id=first, run_id=running["run_id"])
        await client.expect("run.finished", run_id=running["run_id"], timeout=15)
        again = await client.request("chat.send", "run.accepted", conversation_id=second, text="hello")
        finished = await client.expect("run.finished", run_id=again["run_id"])
        assert finished["status"] == "completed"

"""Events of a 0.22-era gateway through the server, against the demo Hermes acting as one (`demo_hermes_next`).

Event names the server does not know (`/demo unknown-event`: `message.interim`, `subagent.*`, and one no
Hermes sends yet) are dropped: the run completes and the connection goes on. `run.interrupted` (the gateway
shut down under the run; `/demo interrupted`) ends the run `failed`, saying so.
"""

from collections.abc import Callable

import pytest

from demo_hermes import DemoHermesServer
from pheby.runs.translate import INTERRUPTED_ERROR
from pheby.settings import Settings
from tests.live_server import LiveServer, hermes_settings
from tests.test_ws_e2e import new_conversation, run_to_end
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]


@pytest.fixture
def server(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    demo_hermes_next: DemoHermesServer,
) -> LiveServer:
    return start_live_server(
        live_settings(**hermes_settings(demo_hermes_next), media_roots=(demo_hermes_next.media_dir,))
    )


async def test_events_the_server_does_not_know_leave_the_run_and_the_connection_intact(server: LiveServer) -> None:
    client = await PhebyClient.connect(server.ws_url, server.secret)
    try:
        conversation_id = await new_conversation(client)
        frames = await run_to_end(client, conversation_id, "/demo unknown-event")
        assert [f["type"] for f in frames[:2]] == ["run.accepted", "message.start"], frames
        assert frames[-1]["status"] == "completed", frames[-1]
        complete = [f for f in frames if f["type"] == "message.complete"]
        assert [f["text"] for f in complete] == ["Still here after events your client may not know."], complete
        assert not [f for f in client.frames if f["type"] == "error"], client.frames
        # The connection and the conversation still work.
        again = await run_to_end(client, conversation_id, "hello after")
        assert again[-1]["status"] == "completed", again[-1]
        pong = await client.request("ping", "pong")
        assert pong["type"] == "pong", pong
    finally:
        await client.close()


async def test_a_run_interrupted_by_a_gateway_shutdown_finishes_failed_and_says_so(server: LiveServer) -> None:
    client = await PhebyClient.connect(server.ws_url, server.secret)
    try:
        conversation_id = await new_conversation(client)
        frames = await run_to_end(client, conversation_id, "/demo interrupted")
        finished = frames[-1]
        assert finished["type"] == "run.finished", frames
        assert finished["status"] == "failed", finished
        assert finished["error"] == INTERRUPTED_ERROR, finished
        assert frames[-2]["type"] == "message.complete", frames[-3:]
        assert len([f for f in frames if f["type"] == "run.finished"]) == 1, frames
        again = await run_to_end(client, conversation_id, "hello after")
        assert again[-1]["status"] == "completed", again[-1]
    finally:
        await client.close()

"""On the real hermes-agent 0.19.0 gateway, without the companion plugin: nothing native is offered, so
`run.steer` and a conversation's own model are `not_implemented` and every path is `declined`.
(The 0.22-era gateway: tests/test_native_features_next_real_hermes.py.)"""

import httpx
import pytest

from tests.conftest import TEST_SECRET
from tests.live_server import LiveServer
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.hermes, pytest.mark.live, pytest.mark.xdist_group("hermes")]


async def test_steer_and_a_conversations_model_are_declined_on_0_19_0(real_hermes_server: LiveServer) -> None:
    server = real_hermes_server
    async with httpx.AsyncClient(base_url=server.base_url) as http:
        body = (await http.get("/api/capabilities", headers={"Authorization": f"Bearer {TEST_SECRET}"})).json()
    assert set(body["capabilities"]["paths"].values()) == {"declined"}, body
    client = await PhebyClient.connect(server.ws_url, server.secret)
    conversation_id = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    accepted = await client.request(
        "chat.send", "run.accepted", conversation_id=conversation_id, text="Go SLOW please", timeout=30
    )
    run_id = accepted["run_id"]
    await client.expect("message.delta", conversation_id=conversation_id, timeout=60)
    refused = await client.request(
        "run.steer", "run.steered", conversation_id=conversation_id, run_id=run_id, text="hi"
    )
    assert refused["error"]["code"] == "not_implemented", refused
    own = await client.request("reasoning.set", "reasoning.changed", effort="low", conversation_id=conversation_id)
    assert own["error"]["code"] == "not_implemented", own
    await client.send("run.cancel", conversation_id=conversation_id, run_id=run_id)
    await client.expect("run.finished", run_id=run_id, timeout=30)
    await client.close()

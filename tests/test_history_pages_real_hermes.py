"""`conversation.open` from the history log against a real hermes-agent 0.19.0: a turn added behind the server's
back (`POST /api/sessions/{id}/chat`, straight to the gateway) still shows up, because the session's
`GET /api/sessions/{id}` state (message count, tokens) changes with it (`pheby.hermes.history_pages`).
"""

import httpx
import pytest

from tests.live_server import LiveServer
from tests.real_hermes import RealHermes
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.hermes, pytest.mark.live, pytest.mark.xdist_group("hermes")]


async def test_a_turn_added_on_the_gateway_directly_shows_up_in_the_next_open(
    real_hermes_server: LiveServer, real_hermes: RealHermes
) -> None:
    server = real_hermes_server
    client = await PhebyClient.connect(server.ws_url, server.secret)
    try:
        created = await client.request("conversation.create", "conversation.created")
        conversation_id = created["conversation_id"]
        accepted = await client.request(
            "chat.send", "run.accepted", conversation_id=conversation_id, text="Say hi PLAIN", timeout=30
        )
        finished = await client.expect("run.finished", run_id=accepted["run_id"], timeout=60)
        assert finished["status"] == "completed", finished
        for _ in range(3):
            before = await client.request("conversation.open", "conversation.history", conversation_id=conversation_id)
        assert [m["role"] for m in before["messages"]] == ["user", "assistant"], before
        async with httpx.AsyncClient(
            base_url=real_hermes.base_url, headers=real_hermes.auth_headers(), timeout=60
        ) as h:
            response = await h.post(f"/api/sessions/pheby_{conversation_id}/chat", json={"message": "PLAIN elsewhere"})
        assert response.status_code == 200, response.text
        after = await client.request("conversation.open", "conversation.history", conversation_id=conversation_id)
        texts = [(m["role"], m["text"]) for m in after["messages"]]
        assert len(texts) == 4, texts
        assert texts[2] == ("user", "PLAIN elsewhere"), texts
    finally:
        await client.close()

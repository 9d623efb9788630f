"""The server's side of the companion plugin without Hermes: tool merging, the internal routes, reporting."""

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import msgspec
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

import hermes_client as hc
from demo_hermes import DemoHermesServer
from handlers.support.app import create_app
from pheby.plugin.conversation_settings import ConversationSettings
from pheby.plugin.extras import PluginExtras
from pheby.plugin.link import PluginLink, SessionSettings
from pheby.runs.plugin_inputs import PluginToolEnded, PluginToolStarted
from pheby.runs.tool_merge import ToolMerge
from pheby.runs.translate import ToolBegan, ToolEnded, began_from_stream, ended_from_stream
from pheby.settings import Settings
from pheby.store.accounts import HermesAccountSettings
from tests.conftest import TEST_SECRET
from tests.live_server import LiveServer
from tests.test_ws_e2e import add_account
from tests.ws_client import PhebyClient

pytestmark = pytest.mark.anyio

PLUGIN_SECRET = "plugin-secret-0123456789abcdef"
WINDOW = 0.05


# --- merging the stream's tool events with the plugin's ---------------------------------------------


class Emitted:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []

    def start(self, event: ToolBegan) -> None:
        assert isinstance(event.tool_call_id, str)
        self.events.append(("running", event.tool_call_id, event.args))

    def end(self, event: ToolEnded) -> None:
        assert isinstance(event.tool_call_id, str)
        self.events.append(("failed" if event.error else "completed", event.tool_call_id, event.duration))


def merge() -> tuple[ToolMerge, Emitted]:
    emitted = Emitted()
    return ToolMerge(WINDOW, emitted.start, emitted.end), emitted


def stream_start(tool: str = "terminal", preview: str = "echo hi") -> ToolBegan:
    return began_from_stream(hc.ToolStarted(run_id="run_1", timestamp=0.0, tool=tool, preview=preview))


def stream_end(tool: str = "terminal", error: bool = False) -> ToolEnded:
    return ended_from_stream(hc.ToolCompleted(run_id="run_1", timestamp=0.0, tool=tool, duration=0.25, error=error))


def plugin_start(call_id: str, tool: str = "terminal") -> ToolBegan:
    return PluginToolStarted("run_1", call_id, tool, {"command": "echo hi"}).began()


def plugin_end(call_id: str, tool: str = "terminal", error: bool = False) -> ToolEnded:
    return PluginToolEnded("run_1", call_id, tool, 500, "failed" if error else "completed", None).ended()


async def test_plugin_first_drives_one_running_and_one_completed() -> None:
    tools, emitted = merge()
    tools.plugin_started(plugin_start("call_a"))
    tools.stream_started(stream_start())
    tools.plugin_completed(plugin_end("call_a"))
    tools.stream_completed(stream_end())
    await asyncio.sleep(WINDOW * 3)
    assert emitted.events == [("running", "call_a", {"command": "echo hi"}), ("completed", "call_a", 0.5)]


async def test_stream_first_waits_for_the_plugin() -> None:
    tools, emitted = merge()
    tools.stream_started(stream_start())
    assert emitted.events == []
    tools.plugin_started(plugin_start("call_a"))
    tools.stream_completed(stream_end(error=True))
    tools.plugin_completed(plugin_end("call_a", error=True))
    await asyncio.sleep(WINDOW * 3)
    assert [e[:2] for e in emitted.events] == [("running", "call_a"), ("failed", "call_a")]


async def test_a_silent_plugin_leaves_the_stream_its_own_translation() -> None:
    tools, emitted = merge()
    tools.stream_started(stream_start())
    await asyncio.sleep(WINDOW * 3)
    [(status, minted, args)] = emitted.events
    assert (status, args) == ("running", msgspec.UNSET)
    assert minted.startswith("t-")
    tools.plugin_started(plugin_start("call_late"))  # too late: the call is already shown
    tools.plugin_completed(plugin_end("call_late"))
    tools.stream_completed(stream_end())
    assert [e[:2] for e in emitted.events] == [("running", minted), ("completed", minted)]


async def test_a_lost_plugin_completion_is_taken_from_the_stream() -> None:
    tools, emitted = merge()
    tools.plugin_started(plugin_start("call_a"))
    tools.stream_started(stream_start())
    tools.stream_completed(stream_end())
    assert len(emitted.events) == 1
    await asyncio.sleep(WINDOW * 3)
    assert emitted.events[1] == ("completed", "call_a", 0.25)


async def test_same_named_calls_pair_in_order_and_flush_settles_everything() -> None:
    tools, emitted = merge()
    tools.plugin_started(plugin_start("call_a"))
    tools.plugin_started(plugin_start("call_b"))
    tools.stream_started(stream_start())
    tools.stream_started(stream_start())
    tools.stream_started(stream_start(tool="read_file"))
    tools.stream_completed(stream_end())
    tools.flush()  # the run ends: no waiting out windows
    ids = [(status, call_id) for status, call_id, _ in emitted.events]
    assert ids[:2] == [("running", "call_a"), ("running", "call_b")]
    assert ids[2][0] == "running"
    assert ids[2][1].startswith("t-")  # read_file had no push
    assert ids[3] == ("completed", "call_a")
    assert len(ids) == 4


# --- the internal routes ------------------------------------------------------------------------------


@pytest.fixture
async def make_client(make_settings: Callable[..., Settings]) -> AsyncIterator[Callable[..., Any]]:
    opened: list[AsyncTestClient[Litestar]] = []

    async def make(**overrides: Any) -> AsyncTestClient[Litestar]:
        values: dict[str, Any] = {"hermes_url": "http://127.0.0.1:9"}
        values.update(overrides)
        client = AsyncTestClient(create_app(make_settings(**values)))
        await client.__aenter__()
        opened.append(client)
        return client

    yield make
    for client in opened:
        await client.__aexit__(None, None, None)


TOOL_START = {
    "event": "tool.start",
    "run_id": "run_unknown",
    "session_id": "s",
    "tool_call_id": "call_1",
    "tool": "terminal",
    "args": {},
}


async def test_internal_routes_do_not_exist_without_a_plugin(make_client: Callable[..., Any]) -> None:
    client = await make_client()
    for path in ("/internal/hermes-plugin/events", "/internal/hermes-plugin/media?run_id=r&filename=f"):
        response = await client.post(path, json=TOOL_START, headers={"X-Pheby-Plugin-Secret": PLUGIN_SECRET})
        assert response.status_code == 404, path


async def test_internal_routes_take_the_plugin_secret_from_allowed_peers_only(make_client: Callable[..., Any]) -> None:
    path = "/internal/hermes-plugin/events"
    remote = await make_client(plugin_secret=PLUGIN_SECRET)  # the test client's peer is "testclient"
    response = await remote.post(path, json=TOOL_START, headers={"X-Pheby-Plugin-Secret": PLUGIN_SECRET})
    assert response.status_code == 403

    client = await make_client(plugin_secret=PLUGIN_SECRET, plugin_peers=("testclient",))
    for headers in (
        {},
        {"X-Pheby-Plugin-Secret": "wrong-secret-0123456789"},
        {"Authorization": f"Bearer {TEST_SECRET}"},  # a user's credentials never open it
        {"X-Pheby-Plugin-Secret": TEST_SECRET},
    ):
        response = await client.post(path, json=TOOL_START, headers=headers)
        assert response.status_code == 401, headers
        assert response.json()["error"]["code"] == "unauthorized"

    good = {"X-Pheby-Plugin-Secret": PLUGIN_SECRET}
    proxied = await client.post(path, json=TOOL_START, headers={**good, "X-Forwarded-For": "203.0.113.9"})
    assert proxied.status_code == 403  # a reverse proxy on loopback relaying someone else
    assert (await client.post(path, json=TOOL_START, headers=good)).json() == {"ok": True}
    clarify = {
        "event": "clarify.request",
        "run_id": "run_unknown",
        "session_id": "s",
        "tool_call_id": "call_1",
        "clarify_id": "c1",
        "question": "Which?",
        "choices": None,
        "timeout": 120,
    }
    assert (await client.post(path, json=clarify, headers=good)).json() == {"accepted": False}
    for bad in ({"event": "tool.start"}, {"event": "no.such"}, {**TOOL_START, "extra": 1}):
        response = await client.post(path, json=bad, headers=good)
        assert response.status_code == 400, bad
        assert response.json()["error"]["code"] == "bad_request"
    media = await client.post(
        "/internal/hermes-plugin/media?run_id=run_unknown&filename=a.png", content=b"x", headers=good
    )
    assert media.status_code == 404


async def test_the_owner_secret_is_never_the_plugin_secret(make_settings: Callable[..., Settings]) -> None:
    link = PluginLink(make_settings(hermes_url="http://127.0.0.1:9", plugin_secret=TEST_SECRET))
    assert link.configured is False
    await link.aclose()


# --- reporting what is live ---------------------------------------------------------------------------


LIVE = PluginExtras(
    live=True, tool_events=True, clarify=True, model=True, reasoning=True, yolo=True, media=True, cron=True
)


async def test_live_extras_are_reported_and_scope_one_conversation(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = start_live_server(live_settings(plugin_secret=PLUGIN_SECRET))
    client = await PhebyClient.connect(server.ws_url, server.secret)
    conversation_id = (await client.request("conversation.create", "conversation.created"))["conversation_id"]

    snapshot = await client.request("models.list", "models.snapshot", conversation_id=conversation_id)
    assert snapshot["plugin"] == msgspec.to_builtins(PluginExtras())  # configured, but the demo has no plugin
    refused = await client.request("model.set", "model.changed", model="demo-model-2", conversation_id=conversation_id)
    assert refused["error"]["code"] == "not_implemented"
    assert "plugin" in refused["error"]["message"]

    monkeypatch.setattr(PluginLink, "extras", lambda self: LIVE)
    snapshot = await client.request("models.list", "models.snapshot", conversation_id=conversation_id)
    assert snapshot["plugin"] == msgspec.to_builtins(LIVE)
    assert snapshot["scope"] == "global"
    changed = await client.request("model.set", "model.changed", model="demo-model-2", conversation_id=conversation_id)
    assert (changed["scope"], changed["conversation_id"], changed["model"]) == (
        "conversation",
        conversation_id,
        "demo-model-2",
    )
    global_provider = snapshot["current_provider"]
    assert global_provider
    assert changed["provider"] == global_provider  # no provider given: the conversation's is the current one
    broadcast = await client.wait_for(lambda f: f["type"] == "model.changed" and "request_id" not in f)
    assert broadcast["conversation_id"] == conversation_id
    snapshot = await client.request("models.list", "models.snapshot", conversation_id=conversation_id)
    assert (snapshot["current_model"], snapshot["scope"]) == ("demo-model-2", "conversation")
    assert snapshot["current_provider"] == global_provider
    current = await client.request("models.current", "model.current", conversation_id=conversation_id)
    assert (current["model"], current["provider"]) == ("demo-model-2", global_provider)
    elsewhere = await client.request("models.current", "model.current")
    assert (elsewhere["scope"], elsewhere["model"] != "demo-model-2") == ("global", True)
    other = await client.request(
        "model.set", "model.changed", model="x", provider="nope", conversation_id=conversation_id
    )
    assert other["error"]["code"] == "not_implemented"

    effort = await client.request("reasoning.set", "reasoning.changed", effort="high", conversation_id=conversation_id)
    assert effort["scope"] == "conversation"
    bad = await client.request("reasoning.set", "reasoning.changed", effort="turbo", conversation_id=conversation_id)
    assert bad["error"]["code"] == "bad_request"
    current = await client.request("reasoning.current", "reasoning.snapshot", conversation_id=conversation_id)
    assert (current["effort"], current["scope"], current["enabled"]) == ("high", "conversation", True)

    async with AsyncTestClient(create_app(server.settings)) as http:  # the same data dir, another app
        body = (await http.get("/api/capabilities", headers={"Authorization": f"Bearer {TEST_SECRET}"})).json()
    assert body["capabilities"]["plugin"] == msgspec.to_builtins(LIVE)
    await client.close()


# --- the link: live only while both directions work -------------------------------------------------


class FakePlugin:
    """The plugin's side of the platform-event route, as an httpx transport."""

    def __init__(self) -> None:
        self.boot_id = "boot-1"
        self.answering = True
        self.received: list[dict[str, Any]] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/platforms/pheby_bridge/events"
        assert request.headers["authorization"] == f"Bearer {PLUGIN_SECRET}"
        payload = json.loads(request.content)
        self.received.append(payload)
        if not self.answering:
            return httpx.Response(503, json={"error": {"code": "platform_unavailable"}})
        if payload["type"] == "hello":
            features = ["tool_events", "clarify", "model", "media"]
            return httpx.Response(200, json={"plugin": "pheby_bridge", "boot_id": self.boot_id, "features": features})
        return httpx.Response(200, json={"ok": True})


async def test_the_link_is_live_only_while_both_directions_work(make_settings: Callable[..., Settings]) -> None:
    plugin = FakePlugin()
    settings = make_settings(hermes_url="http://hermes.test", plugin_secret=PLUGIN_SECRET, plugin_media=False)
    link = PluginLink(settings, transport=httpx.MockTransport(plugin.handler))
    try:
        assert await link.handshake() is True
        assert plugin.received[0]["extras"] == ["tool_events", "clarify", "model", "reasoning", "yolo", "cron"]
        assert link.extras() == PluginExtras()  # reached it, but it has not reached us yet
        assert link.plugin_said_hello("boot-1", ["tool_events"]) == link.server_view()
        extras = link.extras()
        assert (extras.live, extras.tool_events, extras.model) == (True, True, True)
        assert (extras.media, extras.reasoning) == (False, False)  # switched off here; not offered there

        plugin.boot_id = "boot-2"  # Hermes restarted: its plugin says hello first
        link.plugin_said_hello("boot-2", [])
        assert not link.extras().live
        await asyncio.sleep(0.05)  # the handshake that hello triggered
        assert link.extras().live

        plugin.answering = False
        assert await link.push_session(SessionSettings(session_id="s1", model="m")) is False
        assert not link.extras().live
        plugin.answering = True
        await link.tick()  # a failed push makes the next handshake due at once
        assert link.extras().live
        assert await link.push_session(SessionSettings(session_id="s1", yolo=True)) is True
        assert plugin.received[-1] == {
            "type": "session.settings",
            "session_id": "s1",
            "model": None,
            "effort": None,
            "yolo": True,
            "history": False,
        }
    finally:
        await link.aclose()


# --- the plugin's tool events end to end --------------------------------------------------------------


async def plugin_live_server(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[LiveServer, PhebyClient, str]:
    """A live server whose plugin link reports every extra live, a connected client and a new conversation."""

    async def session_pushed(self: PluginLink, settings: SessionSettings) -> bool:
        return True

    monkeypatch.setattr(PluginLink, "extras", lambda self: LIVE)
    monkeypatch.setattr(PluginLink, "push_session", session_pushed)
    server = start_live_server(live_settings(plugin_secret=PLUGIN_SECRET))
    client = await PhebyClient.connect(server.ws_url, server.secret)
    conversation_id = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    return server, client, conversation_id


def hermes_run_of(hermes: DemoHermesServer, conversation_id: str) -> str:
    """The demo Hermes's id of the conversation's active run (the plugin pushes are keyed by it)."""
    runs = hermes.app.state.demo.runs.active()
    run_id: str = next(run.run_id for run in runs if run.session_id == f"pheby_{conversation_id}")
    return run_id


@pytest.mark.parametrize(
    ("plugin_status", "status", "error"),
    [("error", "failed", "permission denied: /tmp/build-output"), ("interrupted", "cancelled", None)],
)
async def test_plugin_tool_ends_keep_their_error_and_unknown_duration(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    demo_hermes: DemoHermesServer,
    monkeypatch: pytest.MonkeyPatch,
    plugin_status: str,
    status: str,
    error: str | None,
) -> None:
    server, client, conversation_id = await plugin_live_server(start_live_server, live_settings, monkeypatch)
    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo approve")
    run_id = accepted["run_id"]
    await client.expect("approval.request", run_id=run_id)  # the terminal call is in flight
    hermes_run_id = hermes_run_of(demo_hermes, conversation_id)
    push = {"run_id": hermes_run_id, "session_id": f"pheby_{conversation_id}", "tool_call_id": "call_p1"}
    async with httpx.AsyncClient(base_url=server.base_url, headers={"X-Pheby-Plugin-Secret": PLUGIN_SECRET}) as http:
        started = {**push, "event": "tool.start", "tool": "terminal", "args": {"command": "rm -rf /tmp/build-output"}}
        assert (await http.post("/internal/hermes-plugin/events", json=started)).status_code == 200
        running = await client.expect("tool.event", run_id=run_id, status="running")
        assert running["tool_call_id"] == "call_p1"
        ended = {**push, "event": "tool.end", "tool": "terminal", "duration_ms": None, "status": plugin_status}
        assert (await http.post("/internal/hermes-plugin/events", json={**ended, "error": error})).status_code == 200
    end = await client.expect("tool.event", run_id=run_id, tool_call_id="call_p1", status=status)
    assert end["duration_ms"] is None
    # The error is kept, scrubbed of what must not reach a client (here the path on the Hermes host).
    assert end.get("error") == (error and error.replace("/tmp/build-output", "<path>"))
    await client.send("run.cancel", conversation_id=conversation_id, run_id=run_id)
    await client.expect("run.finished", run_id=run_id)
    assert len(client.seen("tool.event", run_id=run_id)) == 2
    await client.close()


async def test_plugin_pushes_after_message_complete_are_not_relayed(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    demo_hermes: DemoHermesServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While the run waits for the plugin's MEDIA: files, a late tool push must not follow message.complete."""

    server, client, conversation_id = await plugin_live_server(start_live_server, live_settings, monkeypatch)
    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo image")
    run_id = accepted["run_id"]
    await client.expect("message.complete", conversation_id=conversation_id)  # now waiting for the files
    active = server.services.runs.active(conversation_id)
    assert active is not None
    hermes_run_id = active.hermes_run_id
    push = {"run_id": hermes_run_id, "session_id": f"pheby_{conversation_id}", "tool_call_id": "call_late"}
    late_tool = {**push, "event": "tool.start", "tool": "terminal", "args": {}}
    late_clarify = {
        **push, "event": "clarify.request", "clarify_id": "c1", "question": "Sure?", "choices": None, "timeout": 5,
    }  # fmt: skip
    async with httpx.AsyncClient(base_url=server.base_url, headers={"X-Pheby-Plugin-Secret": PLUGIN_SECRET}) as http:
        replies = [(await http.post("/internal/hermes-plugin/events", json=late)) for late in (late_tool, late_clarify)]
        assert [r.status_code for r in replies] == [200, 200]
        assert replies[1].json()["accepted"] is False  # no client is asked: the plugin lets the run go on
        done = {"event": "media.done", "run_id": hermes_run_id, "offered": 0, "pushed": 0}
        assert (await http.post("/internal/hermes-plugin/events", json=done)).status_code == 200
    finished = await client.expect("run.finished", run_id=run_id)
    assert finished["status"] == "completed"
    assert client.seen("tool.event", run_id=run_id) == []
    assert client.seen("clarify.request") == []
    await client.close()


async def test_plugin_pushes_never_touch_runs_of_another_gateway(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    make_demo_hermes: Callable[..., DemoHermesServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The plugin lives in the server's Hermes: a push naming a run of an account with its own gateway
    is ignored, even were that run given the plugin's extras."""
    other = make_demo_hermes()
    monkeypatch.setattr(ConversationSettings, "extras_for", lambda self, account: LIVE)
    server, _, _ = await plugin_live_server(start_live_server, live_settings, monkeypatch)
    token = await add_account(server.settings, "bob", HermesAccountSettings(url=other.base_url, api_key=other.api_key))
    bob = await PhebyClient.connect(server.ws_url, token)
    conversation_id = (await bob.request("conversation.create", "conversation.created"))["conversation_id"]
    accepted = await bob.request("chat.send", "run.accepted", conversation_id=conversation_id, text="/demo approve")
    run_id = accepted["run_id"]
    request = await bob.expect("approval.request", run_id=run_id)  # the run goes on on bob's own gateway
    hermes_run_id = hermes_run_of(other, conversation_id)
    push = {"run_id": hermes_run_id, "session_id": f"pheby_{conversation_id}", "tool_call_id": "call_evil"}
    pushes = [
        {**push, "event": "tool.start", "tool": "terminal", "args": {"command": "cat /etc/passwd"}},
        {**push, "event": "tool.end", "tool": "terminal", "duration_ms": 5, "status": "ok", "error": None},
        {**push, "event": "clarify.request", "clarify_id": "c1", "question": "Sure?", "choices": None, "timeout": 5},
        {"event": "media.done", "run_id": hermes_run_id, "offered": 1, "pushed": 1},
    ]
    async with httpx.AsyncClient(base_url=server.base_url, headers={"X-Pheby-Plugin-Secret": PLUGIN_SECRET}) as http:
        replies = [await http.post("/internal/hermes-plugin/events", json=body) for body in pushes]
        assert [r.status_code for r in replies] == [200, 200, 200, 200]
        assert replies[2].json()["accepted"] is False
        media = await http.post(
            f"/internal/hermes-plugin/media?run_id={hermes_run_id}&filename=a.png", content=b"\x89PNG", headers={}
        )
        assert media.status_code == 404
    await bob.send("approval.respond", approval_id=request["approval_id"], choice="deny")
    finished = await bob.expect("run.finished", run_id=run_id)
    assert finished["status"] == "completed"
    assert bob.seen("tool.event", tool_call_id="call_evil") == []
    assert bob.seen("clarify.request") == []
    assert bob.seen("attachment.added") == []
    await bob.close()

"""Native features of a 0.22-era gateway, used where advertised, against the demo Hermes acting as either version.

On the 0.22-era demo (`demo_hermes_next`, no plugin, no dashboard) a conversation's own model and effort are
stored and sent with its runs (`ConversationSettings.run_options`), models are listed by the API server itself,
`run.steer` reaches the agent, and `/api/capabilities` and `models.snapshot` say `native`; on the 0.19.0 demo
the same requests are `not_implemented` and the paths `declined` (or `plugin` with a live companion plugin).
`HermesFeatures` itself: start-up never waits on Hermes, and a Hermes that comes back is read again.
"""

import asyncio
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import msgspec
import pytest
from litestar.testing import AsyncTestClient

import hermes_client as hc
from demo_hermes import DemoHermesServer, EchoReply, parse_echo_reply
from demo_hermes.newer import STEER_ANSWER_PREFIX
from handlers.support.app import create_app
from pheby.hermes import features as hermes_features
from pheby.hermes.features import NO_RUN_OPTIONS, FeaturePaths, HermesFeatures, RunOptions
from pheby.hermes.pool import HermesClients
from pheby.plugin.extras import PluginExtras
from pheby.plugin.link import PluginLink, SessionSettings
from pheby.services import open_services
from pheby.settings import Settings
from pheby.store.accounts import Account, Accounts, HermesAccountSettings
from tests.conftest import TEST_SECRET
from tests.live_server import LiveServer, hermes_settings
from tests.ws_client import PhebyClient

pytestmark = pytest.mark.anyio

PLUGIN_SECRET = "plugin-secret-0123456789abcdef"
LIVE = PluginExtras(live=True, tool_events=True, model=True, reasoning=True, yolo=True)
ALL_NATIVE = {"conversation_model": "native", "conversation_effort": "native", "steer": "native"}
ALL_DECLINED = {
    "conversation_model": "declined",
    "conversation_effort": "declined",
    "steer": "declined",
    "stream_resume": "declined",
}
AUTH = {"Authorization": f"Bearer {TEST_SECRET}"}
STEER_TEXT = "mention the weather too"


def on(hermes: DemoHermesServer, *, dashboard: bool = True) -> dict[str, Any]:
    """Settings pointing a server at `hermes`; without its dashboard when `dashboard` is False."""
    values = hermes_settings(hermes)
    if not dashboard:
        values.update(hermes_dashboard_url="", hermes_dashboard_token="")
    return {**values, "media_roots": (hermes.media_dir,)}


async def connected(server: LiveServer) -> tuple[PhebyClient, str]:
    client = await PhebyClient.connect(server.ws_url, server.secret)
    conversation_id = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    return client, conversation_id


async def capabilities_of(server: LiveServer) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server.base_url) as http:
        response = await http.get("/api/capabilities", headers=AUTH)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()["capabilities"]
    return body


# --- per-conversation model and effort ----------------------------------------------------------------


async def test_a_conversations_model_and_effort_are_native_on_a_gateway_with_model_options(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    demo_hermes_next: DemoHermesServer,
) -> None:
    server = start_live_server(live_settings(**on(demo_hermes_next, dashboard=False)))
    client, conversation_id = await connected(server)
    other = (await client.request("conversation.create", "conversation.created"))["conversation_id"]

    snapshot = await client.request("models.list", "models.snapshot", conversation_id=conversation_id)
    assert snapshot["type"] == "models.snapshot", snapshot  # listed by the API server itself: no dashboard
    assert snapshot["providers"]
    assert snapshot["scope"] == "global"
    assert "plugin" not in snapshot
    assert {key: snapshot["paths"][key] for key in ALL_NATIVE} == ALL_NATIVE
    default_model, default_provider = snapshot["current_model"], snapshot["current_provider"]
    other_provider = next(p for p in snapshot["providers"] if p["slug"] != default_provider)

    changed = await client.request(
        "model.set", "model.changed", model="demo-model-2", conversation_id=conversation_id, request_id="m1"
    )
    assert (changed["type"], changed["scope"], changed["conversation_id"], changed["model"]) == (
        "model.changed",
        "conversation",
        conversation_id,
        "demo-model-2",
    ), changed
    assert changed["provider"] == default_provider  # none given: the conversation runs on the current one
    broadcast = await client.wait_for(lambda f: f["type"] == "model.changed" and "request_id" not in f)
    assert broadcast["conversation_id"] == conversation_id
    # Natively any provider goes (the plugin path can only switch models within the current one).
    elsewhere = await client.request(
        "model.set", "model.changed", model="m-x", provider=other_provider["slug"], conversation_id=other
    )
    assert (elsewhere["scope"], elsewhere["provider"]) == ("conversation", other_provider["slug"]), elsewhere

    effort = await client.request("reasoning.set", "reasoning.changed", effort="low", conversation_id=conversation_id)
    assert (effort["type"], effort["scope"], effort["effort"]) == ("reasoning.changed", "conversation", "low"), effort
    bad = await client.request("reasoning.set", "reasoning.changed", effort="turbo", conversation_id=conversation_id)
    assert bad["error"]["code"] == "bad_request"

    current = await client.request("models.current", "model.current", conversation_id=conversation_id)
    assert (current["model"], current["provider"], current["scope"]) == (
        "demo-model-2",
        default_provider,
        "conversation",
    )
    reasoning = await client.request("reasoning.current", "reasoning.snapshot", conversation_id=conversation_id)
    assert (reasoning["effort"], reasoning["scope"], reasoning["enabled"]) == ("low", "conversation", True)
    snapshot = await client.request("models.list", "models.snapshot", conversation_id=conversation_id)
    assert (snapshot["current_model"], snapshot["scope"]) == ("demo-model-2", "conversation")
    unchanged = await client.request("models.current", "model.current")
    assert (unchanged["model"], unchanged["scope"]) == (default_model, "global")
    await client.close()


async def test_run_options_carry_a_conversations_overrides_only_on_a_native_gateway(
    make_settings: Callable[..., Settings], demo_hermes_next: DemoHermesServer, demo_hermes: DemoHermesServer
) -> None:
    async with open_services(make_settings(**on(demo_hermes_next, dashboard=False))) as services:
        owner = await services.accounts.ensure_owner()
        mine = await services.conversations.create(owner.id, "mine")
        plain = await services.conversations.create(owner.id, "plain")
        settings = services.conversation_settings
        provider = await settings.set_model(owner, mine.id, "demo-model-2", None)
        await settings.set_effort(owner, mine.id, "high")
        assert await settings.run_options(owner, mine) == RunOptions(
            model="demo-model-2", provider=None, model_options={"reasoning_effort": "high"}
        )
        assert provider  # the current provider, named in the answer but not pinned for the runs
        assert await settings.run_options(owner, plain) == NO_RUN_OPTIONS
        await settings.set_model(owner, plain.id, "m-x", "openrouter")
        assert await settings.run_options(owner, plain) == RunOptions(model="m-x", provider="openrouter")

    # The same stored overrides on a 0.19.0 gateway: nothing goes with the run (it would be ignored).
    async with open_services(make_settings(**on(demo_hermes))) as services:
        owner = await services.accounts.ensure_owner()
        mine = await services.conversations.get(owner.id, mine.id)
        assert await services.conversation_settings.run_options(owner, mine) == NO_RUN_OPTIONS
        with pytest.raises(Exception) as refused:
            await services.conversation_settings.set_effort(owner, mine.id, "low")
        assert getattr(refused.value, "code", None) == "not_implemented"


async def test_a_conversations_runs_ask_hermes_for_its_own_model_and_effort(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    demo_hermes_next: DemoHermesServer,
) -> None:
    server = start_live_server(live_settings(**on(demo_hermes_next, dashboard=False)))
    client, conversation_id = await connected(server)
    plain = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    await client.request("model.set", "model.changed", model="demo-model-2", conversation_id=conversation_id)
    await client.request("reasoning.set", "reasoning.changed", effort="high", conversation_id=conversation_id)

    async def echo(cid: str) -> EchoReply:
        accepted = await client.request("chat.send", "run.accepted", conversation_id=cid, text="/demo echo")
        assert accepted["type"] == "run.accepted", accepted
        complete = await client.expect("message.complete", conversation_id=cid, timeout=30)
        await client.expect("run.finished", run_id=accepted["run_id"], timeout=30)
        return parse_echo_reply(complete["text"])

    default = await echo(plain)  # before: what a conversation without its own settings runs on
    own = await echo(conversation_id)
    other = await echo(plain)
    assert (own.model, own.reasoning_effort) == ("demo-model-2", "high")
    assert (
        (other.model, other.reasoning_effort) == (default.model, default.reasoning_effort) != ("demo-model-2", "high")
    )
    await client.close()


# --- what is reported ---------------------------------------------------------------------------------


async def test_capabilities_say_native_on_the_0_22_era_gateway_and_declined_on_0_19_0(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    demo_hermes_next: DemoHermesServer,
    demo_hermes: DemoHermesServer,
) -> None:
    old = start_live_server(live_settings(**on(demo_hermes)))
    new = start_live_server(
        live_settings(**on(demo_hermes_next, dashboard=False), data_dir=old.settings.data_dir.parent / "new")
    )
    old_caps, new_caps = await capabilities_of(old), await capabilities_of(new)
    assert old_caps["paths"] == ALL_DECLINED
    assert "plugin" not in old_caps
    assert new_caps["paths"] == {**ALL_NATIVE, "stream_resume": "declined"}  # not known until a stream shows it

    for server in (old, new):  # one run each: the 0.22-era stream numbers its events, 0.19.0's does not
        client, conversation_id = await connected(server)
        accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text="hi")
        await client.expect("run.finished", run_id=accepted["run_id"], timeout=30)
        snapshot = await client.request("models.list", "models.snapshot")
        assert snapshot["paths"] == (await capabilities_of(server))["paths"]
        await client.close()
    assert (await capabilities_of(old))["paths"] == ALL_DECLINED
    assert (await capabilities_of(new))["paths"] == {**ALL_NATIVE, "stream_resume": "native"}


async def test_with_a_live_plugin_0_19_0_says_plugin_and_the_0_22_era_gateway_turns_the_plugins_model_off(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    demo_hermes_next: DemoHermesServer,
    demo_hermes: DemoHermesServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pushed: list[SessionSettings] = []

    async def session_pushed(self: PluginLink, settings: SessionSettings) -> bool:
        pushed.append(settings)
        return True

    monkeypatch.setattr(PluginLink, "extras", lambda self: LIVE)
    monkeypatch.setattr(PluginLink, "push_session", session_pushed)
    old = start_live_server(live_settings(**on(demo_hermes), plugin_secret=PLUGIN_SECRET))
    caps = await capabilities_of(old)
    assert caps["paths"] == {**ALL_DECLINED, "conversation_model": "plugin", "conversation_effort": "plugin"}
    assert caps["plugin"] == msgspec.to_builtins(LIVE)

    new = start_live_server(
        live_settings(
            **on(demo_hermes_next), plugin_secret=PLUGIN_SECRET, data_dir=old.settings.data_dir.parent / "new"
        )
    )
    caps = await capabilities_of(new)
    assert {key: caps["paths"][key] for key in ALL_NATIVE} == ALL_NATIVE
    assert caps["plugin"] == msgspec.to_builtins(msgspec.structs.replace(LIVE, model=False, reasoning=False))
    client, conversation_id = await connected(new)
    await client.request("model.set", "model.changed", model="demo-model-2", conversation_id=conversation_id)
    await client.request("reasoning.set", "reasoning.changed", effort="low", conversation_id=conversation_id)
    mine = [s for s in pushed if s.session_id == f"pheby_{conversation_id}"]
    assert mine, "the plugin still gets the session's other settings"
    assert all(s.model is None and s.effort is None for s in mine), "the native path wins"
    await client.close()


# --- steer --------------------------------------------------------------------------------------------


async def steerable_run(client: PhebyClient, conversation_id: str) -> str:
    accepted = await client.request(
        "chat.send", "run.accepted", conversation_id=conversation_id, text="/demo steerable"
    )
    assert accepted["type"] == "run.accepted", accepted
    await client.expect("message.delta", conversation_id=conversation_id, timeout=30)
    run_id: str = accepted["run_id"]
    return run_id


async def test_run_steer_reaches_the_agent_on_the_0_22_era_gateway(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    demo_hermes_next: DemoHermesServer,
) -> None:
    server = start_live_server(live_settings(**on(demo_hermes_next)))
    client, conversation_id = await connected(server)
    run_id = await steerable_run(client, conversation_id)

    fields: dict[str, Any]
    for fields, code in [
        ({"text": "   "}, "bad_request"),
        ({"text": "x" * 64_001}, "too_large"),
        ({"text": "hi", "run_id": "not-this-run"}, "not_found"),
        ({"text": "hi", "conversation_id": "no-such-conversation"}, "not_found"),
    ]:
        message: dict[str, Any] = {"conversation_id": conversation_id, "run_id": run_id, **fields}
        refused = await client.request("run.steer", "run.steered", **message)
        assert refused["error"]["code"] == code, (fields, refused)

    steered = await client.request(
        "run.steer", "run.steered", conversation_id=conversation_id, run_id=run_id, text=STEER_TEXT, request_id="s1"
    )
    assert (steered["type"], steered["conversation_id"], steered["run_id"], steered["accepted"]) == (
        "run.steered",
        conversation_id,
        run_id,
        True,
    ), steered
    broadcast = await client.wait_for(lambda f: f["type"] == "run.steered" and "request_id" not in f)
    assert broadcast["run_id"] == run_id
    complete = await client.expect("message.complete", conversation_id=conversation_id, timeout=30)
    assert complete["text"].endswith(f"{STEER_ANSWER_PREFIX}{STEER_TEXT}")
    finished = await client.expect("run.finished", run_id=run_id, timeout=30)
    assert finished["status"] == "completed"
    late = await client.request("run.steer", "run.steered", conversation_id=conversation_id, run_id=run_id, text="hi")
    assert late["error"]["code"] == "not_found"
    await client.close()


async def test_run_steer_is_not_implemented_on_0_19_0(
    start_live_server: Callable[[Settings], LiveServer],
    live_settings: Callable[..., Settings],
    demo_hermes: DemoHermesServer,
) -> None:
    server = start_live_server(live_settings(**on(demo_hermes)))
    client, conversation_id = await connected(server)
    run_id = await steerable_run(client, conversation_id)
    refused = await client.request(
        "run.steer", "run.steered", conversation_id=conversation_id, run_id=run_id, text=STEER_TEXT
    )
    assert refused["error"]["code"] == "not_implemented", refused
    await client.send("run.cancel", conversation_id=conversation_id, run_id=run_id)
    await client.expect("run.finished", run_id=run_id, timeout=30)
    await client.close()


# --- reading what a gateway offers --------------------------------------------------------------------


@pytest.fixture
def silent_hermes_url() -> Iterator[str]:
    """A loopback port that takes connections (the kernel's backlog) but never answers: a hung Hermes."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


async def test_start_up_does_not_wait_for_a_hung_hermes(
    make_settings: Callable[..., Settings], silent_hermes_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hermes_features, "READ_TIMEOUT_SECONDS", 60.0)  # a start-up read would wait 30 s (httpx)
    app = create_app(make_settings(hermes_url=silent_hermes_url, hermes_api_key="k"))
    began = time.monotonic()
    async with AsyncTestClient(app) as http:
        started_in = time.monotonic() - began
        body = (await http.get("/api/capabilities", headers=AUTH)).json()  # waits ≤ 2 s per probe
    assert started_in < 15, f"start-up took {started_in:.1f} s: it waited for Hermes"
    assert body["capabilities"]["paths"] == ALL_DECLINED


async def test_a_new_hermes_process_seen_by_the_plugin_is_read_at_once(make_settings: Callable[..., Settings]) -> None:
    restarts: list[str] = []
    boot = ["boot-1"]

    def plugin(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"plugin": "pheby_bridge", "boot_id": boot[0], "features": []})

    settings = make_settings(hermes_url="http://hermes.test", plugin_secret=PLUGIN_SECRET)
    link = PluginLink(
        settings, transport=httpx.MockTransport(plugin), when_hermes_restarts=lambda: restarts.append(boot[0])
    )
    try:
        assert await link.handshake()
        assert await link.handshake()  # the same process again: nothing to read
        boot[0] = "boot-2"  # Hermes restarted
        assert await link.handshake()
        assert restarts == ["boot-1", "boot-2"]
    finally:
        await link.aclose()


class ScriptedGateway:
    """A gateway that is down, then 0.19.0, then (restarted) 0.22-era: what `/health` and `/v1/capabilities` say."""

    def __init__(self) -> None:
        self.state = "down"

    def handler(self, request: httpx.Request) -> httpx.Response:
        if self.state == "down":
            raise httpx.ConnectError("refused", request=request)
        version, features = (
            ("0.19.0", {"run_submission": True}) if self.state == "old" else ("0.22.2", {"run_steer": True})
        )
        if request.url.path == "/health":
            return httpx.Response(200, json={"status": "ok", "version": version})
        return httpx.Response(200, json={"features": features, "endpoints": {}})


async def test_a_hermes_that_comes_back_is_read_again(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway = ScriptedGateway()
    settings = make_settings(hermes_url="http://127.0.0.1:9", hermes_api_key="k")
    hermes = HermesClients(settings)
    monkeypatch.setattr(hermes_features, "RETRY_FIRST_SECONDS", 0.01)
    monkeypatch.setattr(hermes_features, "REREAD_SECONDS", 0.05)

    class OneAccount(Accounts):
        def __init__(self) -> None:
            pass

        async def list_enabled(self) -> list[Account]:
            return [account]

    account = Account(
        id="a1", name="owner", is_owner=True, disabled=False, created_at=0.0, hermes=HermesAccountSettings()
    )
    hermes._clients[("http://127.0.0.1:9", "k", None, None)] = hc.HermesClient(
        "http://127.0.0.1:9", "k", transport=httpx.MockTransport(gateway.handler)
    )
    features = HermesFeatures(hermes, OneAccount())
    watcher = asyncio.create_task(features.watch())
    try:
        async with asyncio.timeout(10):
            await asyncio.sleep(0.1)
            assert features.known(account) == hermes_features.NOTHING_NATIVE  # down: nothing native, no failure
            gateway.state = "old"
            while features.known(account).version != "0.19.0":
                await asyncio.sleep(0.01)
            assert features.paths(account, PluginExtras()) == FeaturePaths(**ALL_DECLINED)  # type: ignore[arg-type]
            gateway.state = "down"  # a restart: reads fail meanwhile, and the last answer is kept
            await asyncio.sleep(0.1)
            assert features.known(account).version == "0.19.0"
            gateway.state = "new"
            while not features.known(account).run_steer:
                await asyncio.sleep(0.01)
            assert features.paths(account, PluginExtras()).steer == "native"
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await hermes.aclose()

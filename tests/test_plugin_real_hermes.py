"""The companion Hermes plugin against a real hermes-agent 0.19.0 gateway, through the server's WebSocket.

One gateway for the module, its home prepared by `pheby hermes install-plugin` (pointed at the
server's port, chosen before the gateway starts), driven by the scripted fake LLM. The server runs
with tool-aware history on, job polling off, a 4 s clarify timeout, and MEDIA roots that exclude
the fake LLM's scratch folder (so a delivered file can only have come through the plugin).

The last test stops that server, so the plugin's pushes go nowhere ("the service is down"), and
runs the earlier WebSocket scenarios through another server: everything falls back.
"""

import asyncio
import contextlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from websockets.asyncio.client import connect

from hermes_client import HermesClient
from pheby.cli import main as pheby_main
from pheby.plugin.install import read_server_secret
from pheby.redact import REDACTED
from pheby.settings import Settings, load_settings
from tests import test_ws_real_hermes as earlier
from tests.conftest import TEST_SECRET
from tests.fake_llm import SECRET_ARG
from tests.live_server import LiveServer, _Runner, free_port
from tests.real_hermes import RealHermes, hermes_gateway
from tests.ws_client import Frame, PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.hermes, pytest.mark.live, pytest.mark.xdist_group("hermes-plugin")]

OWNER: Final = {"Authorization": f"Bearer {TEST_SECRET}"}
CLARIFY_TIMEOUT: Final = 4.0
CRON_TASK: Final = "Plugin cron"
EXTRAS: Final = ("tool_events", "clarify", "model", "reasoning", "yolo", "media", "cron", "history")


class FrameRecorder:
    """A WebSocket client on its own thread and loop, recording every frame with the time it arrived."""

    def __init__(self, ws_url: str, secret: str) -> None:
        self._url, self._secret = ws_url, secret
        self._lock = threading.Lock()
        self._frames: list[tuple[float, Frame]] = []
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), name="frame-recorder", daemon=True)

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(10), "the recorder could not connect"

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started (a set-up that failed early never starts it)
            self._thread.join(10)

    async def _run(self) -> None:
        async with connect(self._url) as ws:
            await ws.send(json.dumps({"type": "hello", "secret": self._secret, "protocol_version": 1}))
            while not self._stop.is_set():
                try:
                    raw = await asyncio.wait_for(ws.recv(), 0.2)
                except TimeoutError:
                    continue
                except Exception:  # the server went away
                    return
                frame = json.loads(raw)
                with self._lock:
                    self._frames.append((time.time(), frame))
                if frame.get("type") == "ready":
                    self._ready.set()

    def find(self, match: Callable[[Frame], bool]) -> tuple[float, Frame] | None:
        with self._lock:
            return next(((at, f) for at, f in self._frames if match(f)), None)

    async def wait_for(self, match: Callable[[Frame], bool], timeout: float) -> tuple[float, Frame]:
        deadline = time.monotonic() + timeout
        while (found := self.find(match)) is None:
            assert time.monotonic() < deadline, "the recorder never saw the frame"
            await asyncio.sleep(0.1)
        return found


@dataclass
class PluginSetup:
    hermes: RealHermes
    server: LiveServer
    runner: _Runner
    base: Path
    recorder: FrameRecorder
    cron_job_id: str

    @property
    def secret(self) -> str:
        return read_server_secret(self.server.settings.data_dir)


def wait_until_live(base_url: str, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    plugin: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = httpx.get(f"{base_url}/api/capabilities", headers=OWNER, timeout=5).json()
        plugin = body["capabilities"].get("plugin", {})
        if plugin.get("live"):
            return plugin
        time.sleep(0.2)
    raise AssertionError(f"the plugin never became live: {plugin}")


@contextlib.contextmanager
def started_plugin_setup(hermes_exe: Path, base: Path) -> Iterator[PluginSetup]:
    """A gateway of the `hermes_exe` target with the plugin installed, a server for it and a frame recorder,
    under `base`; every test module of a target runs on one (its `plugin_setup` fixture)."""
    port = free_port()
    data_dir = base / "pheby-data"
    media_root = base / "media-root"  # anything but the fake LLM's scratch folder
    media_root.mkdir()

    def install(home: Path) -> None:
        argv = ["--data-dir", str(data_dir), "hermes", "install-plugin", "--home", str(home)]
        assert pheby_main([*argv, "--server-url", f"http://127.0.0.1:{port}"]) == 0

    with hermes_gateway(base / "gateway", hermes=hermes_exe, before_start=install) as hermes:
        settings = load_settings(
            {},
            data_dir=data_dir,
            secret=TEST_SECRET,
            port=port,
            hermes_url=hermes.base_url,
            hermes_api_key=hermes.api_key,
            media_roots=(media_root,),
            plugin_history=True,
            plugin_clarify_timeout=CLARIFY_TIMEOUT,
            job_polling=False,
        )
        runner = _Runner(settings)
        runner.start()
        base_url = f"http://127.0.0.1:{port}"
        recorder = FrameRecorder(f"ws://127.0.0.1:{port}/ws", TEST_SECRET)
        try:
            server = LiveServer(settings, base_url, f"ws://127.0.0.1:{port}/ws", runner.server, runner.thread)
            wait_until_live(base_url)
            recorder.start()
            # The cron run is started now and checked by a later test: the gateway's cron tick is 60 s.
            body = {"name": CRON_TASK, "schedule": "every 2h", "prompt": "Say hi PLAIN from cron"}
            task = httpx.post(f"{base_url}/api/tasks", json=body, headers=OWNER, timeout=10).json()["task"]
            ran = httpx.post(f"{base_url}/api/tasks/{task['id']}/run", headers=OWNER, timeout=10)
            assert ran.status_code == 200, ran.text
            yield PluginSetup(hermes, server, runner, base, recorder, task["id"])
        finally:
            recorder.stop()
            runner.stop()


@pytest.fixture(scope="module")
def plugin_setup(hermes_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PluginSetup]:
    with started_plugin_setup(hermes_venv, tmp_path_factory.mktemp("plugin-hermes")) as setup:
        yield setup


async def chat(client: PhebyClient, text: str, conversation_id: str | None = None) -> tuple[str, str]:
    if conversation_id is None:
        created = await client.request("conversation.create", "conversation.created")
        conversation_id = created["conversation_id"]
    accepted = await client.request("chat.send", "run.accepted", conversation_id=conversation_id, text=text, timeout=30)
    assert accepted["type"] == "run.accepted", accepted
    return conversation_id, accepted["run_id"]


async def session_of(client: PhebyClient, conversation_id: str) -> str:
    listing = await client.request("conversation.list", "conversation.snapshot")
    session_id: str = next(c for c in listing["conversations"] if c["conversation_id"] == conversation_id)["session_id"]
    return session_id


def llm_request_for(hermes: RealHermes, last_user_text: str) -> dict[str, Any]:
    """The newest of the agent's own model requests (they carry tools; a newer Hermes's auxiliary calls
    after the turn quote it too) whose last user message is `last_user_text`."""
    for body in reversed(hermes.chat_requests()):
        if not body.get("tools"):
            continue
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        if users and users[-1].get("content") == last_user_text:
            found: dict[str, Any] = body
            return found
    raise AssertionError(f"no model request for {last_user_text!r}")


# --- detection ------------------------------------------------------------------------------------


async def test_capabilities_report_every_extra_live(plugin_setup: PluginSetup) -> None:
    async with httpx.AsyncClient(base_url=plugin_setup.server.base_url) as http:
        body = (await http.get("/api/capabilities", headers=OWNER)).json()
    assert body["capabilities"]["plugin"] == {"live": True, **dict.fromkeys(EXTRAS, True)}


# --- tool events ----------------------------------------------------------------------------------


async def test_tool_events_carry_hermes_ids_and_redacted_args(plugin_setup: PluginSetup) -> None:
    client = await PhebyClient.connect(plugin_setup.server.ws_url, TEST_SECRET)
    conversation_id, run_id = await chat(client, "Please run SECRETARG now")
    finished = await client.expect("run.finished", run_id=run_id, timeout=60)
    assert finished["status"] == "completed"
    await asyncio.sleep(0.5)  # nothing late may follow (a second event for the same call)
    events = client.seen("tool.event", run_id=run_id)
    assert [e["status"] for e in events] == ["running", "completed"], events
    call_id = events[0]["tool_call_id"]
    assert events[1]["tool_call_id"] == call_id
    assert not call_id.startswith("t-")  # Hermes's own id, not one the server minted
    assert events[0]["args_redacted"] == {"command": "echo secret-arg-ok", "api_key": REDACTED}
    assert SECRET_ARG not in json.dumps(client.frames)

    session_id = await session_of(client, conversation_id)
    async with HermesClient(plugin_setup.hermes.base_url, plugin_setup.hermes.api_key) as hermes:
        messages = await hermes.session_messages(session_id)
    called = [call["id"] for m in messages if m.role == "assistant" for call in (m.tool_calls or [])]
    answered = [m.tool_call_id for m in messages if m.role == "tool"]
    assert called == [call_id]
    assert answered == [call_id]
    await client.close()


# --- clarify --------------------------------------------------------------------------------------


async def test_clarify_answered_cancelled_and_expired(plugin_setup: PluginSetup) -> None:
    client = await PhebyClient.connect(plugin_setup.server.ws_url, TEST_SECRET)

    # 1. answered: the model gets the answer as the tool result
    conversation_id, run_id = await chat(client, "Please CLARIFY the colour")
    request = await client.expect("clarify.request", run_id=run_id, timeout=60)
    assert request["question"] == "Which colour?"
    assert request["choices"] == ["red", "blue"]
    assert request["conversation_id"] == conversation_id
    await client.send("clarify.respond", clarify_id=request["clarify_id"], response="blue", request_id="c1")
    resolved = await client.expect("clarify.resolved", clarify_id=request["clarify_id"])
    assert resolved["accepted"] is True
    assert resolved["request_id"] == "c1"
    assert (await client.expect("run.finished", run_id=run_id, timeout=60))["status"] == "completed"
    tool_results = [
        json.loads(m["content"])
        for m in llm_request_for(plugin_setup.hermes, "Please CLARIFY the colour")["messages"]
        if m.get("role") == "tool"
    ]
    # One answer (0.19.0), or the answers of a several-question clarify (0.22-era: `responses`).
    answer = tool_results[-1]["responses"][0] if "responses" in tool_results[-1] else tool_results[-1]
    assert answer["user_response"] == "blue"

    # 2. cancelled while the question waits: the run ends cancelled within 2 s
    conversation_id, run_id = await chat(client, "Please CLARIFY again")
    request = await client.expect("clarify.request", run_id=run_id, timeout=60)
    cancelled_at = time.monotonic()
    await client.send("run.cancel", conversation_id=conversation_id, run_id=run_id)
    finished = await client.expect("run.finished", run_id=run_id, timeout=10)
    assert finished["status"] == "cancelled"
    assert time.monotonic() - cancelled_at < 2.0
    [expired] = client.seen("clarify.resolved", clarify_id=request["clarify_id"])  # before run.finished
    assert (expired["accepted"], expired["expired"]) == (False, True)

    # 3. unanswered: it expires after the configured timeout and clients are told
    conversation_id, run_id = await chat(client, "Please CLARIFY once more")
    request = await client.expect("clarify.request", run_id=run_id, timeout=60)
    asked_at = time.monotonic()
    expired = await client.expect("clarify.resolved", clarify_id=request["clarify_id"], timeout=CLARIFY_TIMEOUT + 10)
    assert (expired["accepted"], expired["expired"]) == (False, True)
    assert time.monotonic() - asked_at >= CLARIFY_TIMEOUT - 1
    late = await client.request("clarify.respond", "clarify.resolved", clarify_id=request["clarify_id"], response="red")
    assert late["error"]["code"] == "clarify_not_found"
    assert (await client.expect("run.finished", run_id=run_id, timeout=60))["status"] == "completed"
    await client.close()


# --- model and effort -----------------------------------------------------------------------------


async def test_model_and_effort_for_one_conversation(plugin_setup: PluginSetup) -> None:
    client = await PhebyClient.connect(plugin_setup.server.ws_url, TEST_SECRET)
    own = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    other = (await client.request("conversation.create", "conversation.created"))["conversation_id"]

    changed = await client.request("model.set", "model.changed", model="fake-model-override", conversation_id=own)
    assert (changed["scope"], changed["conversation_id"]) == ("conversation", own)
    effort = await client.request("reasoning.set", "reasoning.changed", effort="low", conversation_id=own)
    assert (effort["scope"], effort["effort"]) == ("conversation", "low")
    current = await client.request("models.current", "model.current", conversation_id=own)
    assert (current["model"], current["scope"]) == ("fake-model-override", "conversation")
    reasoning = await client.request("reasoning.current", "reasoning.snapshot", conversation_id=own)
    assert (reasoning["effort"], reasoning["scope"]) == ("low", "conversation")

    for conversation_id, text in ((own, "Say hi PLAIN in the overridden one"), (other, "Say hi PLAIN elsewhere")):
        _, run_id = await chat(client, text, conversation_id)
        assert (await client.expect("run.finished", run_id=run_id, timeout=60))["status"] == "completed"
    overridden = llm_request_for(plugin_setup.hermes, "Say hi PLAIN in the overridden one")
    assert (overridden["model"], overridden.get("reasoning_effort")) == ("fake-model-override", "low")
    untouched = llm_request_for(plugin_setup.hermes, "Say hi PLAIN elsewhere")
    assert untouched["model"] == "fake-model"
    assert untouched.get("reasoning_effort") != "low"
    await client.close()


# --- YOLO -----------------------------------------------------------------------------------------


async def test_yolo_for_one_conversation_keeps_hard_limits(plugin_setup: PluginSetup) -> None:
    hermes = plugin_setup.hermes
    client = await PhebyClient.connect(plugin_setup.server.ws_url, TEST_SECRET)
    yolo = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    careful = (await client.request("conversation.create", "conversation.created"))["conversation_id"]
    assert (await client.request("yolo.set", "yolo.changed", conversation_id=yolo, enabled=True))["enabled"] is True

    hermes.danger_dir.mkdir(parents=True, exist_ok=True)
    _, run_id = await chat(client, "Please run DANGER now", yolo)
    complete = await client.expect("message.complete", timeout=60, conversation_id=yolo)
    assert (await client.expect("run.finished", run_id=run_id, timeout=60))["status"] == "completed"
    assert not client.seen("approval.request", run_id=run_id)
    # Hermes's own session YOLO ran it: no approval was asked even of the server (which would say "once").
    assert "required approval" not in complete["text"]
    assert not hermes.danger_dir.exists()

    hermes.danger_dir.mkdir(parents=True, exist_ok=True)
    _, run_id = await chat(client, "Please run DANGER here too", careful)
    request = await client.expect("approval.request", run_id=run_id, timeout=60)
    await client.send("approval.respond", approval_id=request["approval_id"], choice="deny")
    assert (await client.expect("run.finished", run_id=run_id, timeout=60))["status"] == "completed"
    assert hermes.danger_dir.exists()

    _, run_id = await chat(client, "Please run HARDLINE now", yolo)
    complete = await client.expect("message.complete", timeout=60, conversation_id=yolo)
    assert (await client.expect("run.finished", run_id=run_id, timeout=60))["status"] == "completed"
    assert "BLOCKED" in complete["text"]
    assert "hardline" in complete["text"].lower()
    assert not client.seen("approval.request", run_id=run_id)
    await client.close()


# --- MEDIA ----------------------------------------------------------------------------------------


async def test_media_file_arrives_as_bytes_through_the_plugin(plugin_setup: PluginSetup) -> None:
    pixel = plugin_setup.hermes.scratch_dir / "pixel.png"
    roots = plugin_setup.server.settings.media_roots
    assert all(not pixel.resolve().is_relative_to(root.resolve()) for root in roots)
    client = await PhebyClient.connect(plugin_setup.server.ws_url, TEST_SECRET)
    conversation_id, run_id = await chat(client, "MEDIA please")
    added = await client.expect("attachment.added", conversation_id=conversation_id, timeout=60)
    assert (await client.expect("run.finished", run_id=run_id, timeout=60))["status"] == "completed"
    attachment = added["attachment"]
    assert attachment["filename"] == "pixel.png"
    assert (attachment["mime_type"], attachment["kind"], attachment["direction"]) == ("image/png", "image", "outbound")
    assert attachment["message_id"] == f"draft-{run_id}"
    async with httpx.AsyncClient(base_url=plugin_setup.server.base_url) as http:
        download = await http.get(attachment["download_path"], headers=OWNER)
    assert download.status_code == 200
    assert download.content == pixel.read_bytes()
    complete = client.seen("message.complete", conversation_id=conversation_id)[-1]
    assert "MEDIA:" not in complete["text"]
    await client.close()


# --- tool-aware history ---------------------------------------------------------------------------


async def test_second_turn_gets_the_first_turns_tool_call_and_result(plugin_setup: PluginSetup) -> None:
    client = await PhebyClient.connect(plugin_setup.server.ws_url, TEST_SECRET)
    conversation_id, run_id = await chat(client, "turn one HARMLESS")
    assert (await client.expect("run.finished", run_id=run_id, timeout=60))["status"] == "completed"
    _, run_id = await chat(client, "turn two Say hi PLAIN", conversation_id)
    assert (await client.expect("run.finished", run_id=run_id, timeout=60))["status"] == "completed"

    session_id = await session_of(client, conversation_id)
    async with HermesClient(plugin_setup.hermes.base_url, plugin_setup.hermes.api_key) as hermes:
        stored = await hermes.session_messages(session_id)
    call_id = next(call["id"] for m in stored if m.role == "assistant" for call in (m.tool_calls or []))
    sent = llm_request_for(plugin_setup.hermes, "turn two Say hi PLAIN")["messages"]
    roles = [m["role"] for m in sent]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert sent[1]["content"] == "turn one HARMLESS"
    assert [call["id"] for call in sent[2]["tool_calls"]] == [call_id]
    assert sent[2]["tool_calls"][0]["function"]["name"] == "terminal"
    assert sent[3]["tool_call_id"] == call_id
    assert "harmless-ok" in sent[3]["content"]
    await client.close()


# --- cron -----------------------------------------------------------------------------------------


async def test_cron_output_reaches_a_client_within_5_seconds(plugin_setup: PluginSetup) -> None:
    recorder = plugin_setup.recorder
    _, named = await recorder.wait_for(
        lambda f: f.get("type") == "conversation.updated" and f.get("name") == CRON_TASK, timeout=150
    )
    conversation_id = named["conversation_id"]
    received_at, complete = await recorder.wait_for(
        lambda f: f.get("type") == "message.complete" and f.get("conversation_id") == conversation_id, timeout=30
    )
    assert complete["text"].startswith("Hello from fake LLM. You said: [IMPORTANT: You are running as a scheduled cron")
    prefix = f"cron_{plugin_setup.cron_job_id}_"
    async with HermesClient(plugin_setup.hermes.base_url, plugin_setup.hermes.api_key) as hermes:
        for _ in range(100):
            sessions = [s for s in (await hermes.list_sessions(source="cron")).data if s.id.startswith(prefix)]
            if sessions and sessions[0].ended_at is not None:
                break
            await asyncio.sleep(0.2)
    assert sessions, "the cron run left no session"
    ended_at = sessions[0].ended_at
    assert ended_at is not None
    assert received_at - ended_at < 5.0, (received_at, ended_at)


# --- the gateway's own log ------------------------------------------------------------------------


def test_the_plugin_raises_nothing_in_the_gateway(plugin_setup: PluginSetup) -> None:
    """After the scenarios above (pytest keeps file order), and before the service goes away."""
    log = plugin_setup.hermes.gateway_log.read_text(encoding="utf-8", errors="replace")
    assert "[pheby_bridge] ready" in log
    # Hermes logs a failing hook or middleware under its plugin loader's name; a crash has the plugin's frames.
    # A line naming another plugin's hook callback (0.22's bundled raft platform's `_on_session_start`, skipped
    # once it timed out on a loaded machine) is that plugin's, not this one's.
    complaints = [
        line
        for line in log.splitlines()
        if ("hermes_cli.plugins" in line or "pheby_bridge:" in line)
        and (" WARNING " in line or " ERROR " in line)
        and not _names_another_plugins_callback(line)
    ]
    assert complaints == []
    assert "plugins/pheby_bridge/" not in log


# pheby_bridge's hook callbacks (hermes_plugin/pheby_bridge/hooks.py registers them under these names).
OUR_CALLBACKS = frozenset({"pre_tool_call", "post_tool_call", "post_llm_call", "on_session_end"})


def _names_another_plugins_callback(line: str) -> bool:
    named = re.search(r"callback (\w+)", line)
    return named is not None and named.group(1) not in OUR_CALLBACKS


# --- without the service --------------------------------------------------------------------------


async def test_earlier_scenarios_pass_while_the_service_is_down(plugin_setup: PluginSetup, tmp_path: Path) -> None:
    """The plugin's pushes go to a server that is gone; another server on another port falls back."""
    plugin_setup.runner.stop()
    settings = load_settings(
        {},
        data_dir=tmp_path / "data",
        secret=TEST_SECRET,
        port=free_port(),
        hermes_url=plugin_setup.hermes.base_url,
        hermes_api_key=plugin_setup.hermes.api_key,
        plugin_secret=plugin_setup.secret,
        plugin_history=True,
    )
    runner = _Runner(settings)
    runner.start()
    try:
        port = settings.port
        server = LiveServer(
            settings, f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/ws", runner.server, runner.thread
        )
        await asyncio.sleep(1.0)  # the start-up handshake reaches the plugin; its hello back cannot arrive
        async with httpx.AsyncClient(base_url=server.base_url) as http:
            body = (await http.get("/api/capabilities", headers=OWNER)).json()
        assert body["capabilities"]["plugin"]["live"] is False
        await earlier.test_streaming(server)
        await earlier.test_approval_once(server, plugin_setup.hermes)
        await earlier.test_approval_deny(server, plugin_setup.hermes)
        await earlier.test_cancel_mid_stream(server)

        # The plugin's own features do not hold a run up either: clarify cannot reach anyone, and says so.
        client = await PhebyClient.connect(server.ws_url, TEST_SECRET)
        started = time.monotonic()
        _, run_id = await chat(client, "Please CLARIFY with nobody there")
        finished = await client.expect("run.finished", run_id=run_id, timeout=60)
        assert finished["status"] == "completed"
        assert time.monotonic() - started < 20
        await client.close()
    finally:
        runner.stop()


@pytest.mark.xdist_group("hermes")  # on the shared gateway, so with its group
async def test_earlier_scenarios_pass_with_the_plugin_absent(
    real_hermes: RealHermes, tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    """A server set up for the plugin, on a gateway without it: the handshake fails and nothing changes."""
    settings = make_settings(
        port=free_port(),
        hermes_url=real_hermes.base_url,
        hermes_api_key=real_hermes.api_key,
        plugin_secret="a-plugin-secret-that-nobody-knows",
    )
    runner = _Runner(settings)
    runner.start()
    try:
        port = settings.port
        server = LiveServer(
            settings, f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/ws", runner.server, runner.thread
        )
        async with httpx.AsyncClient(base_url=server.base_url) as http:
            body = (await http.get("/api/capabilities", headers=OWNER)).json()
        assert body["capabilities"]["plugin"] == {"live": False, **dict.fromkeys(EXTRAS, False)}
        await earlier.test_streaming(server)
        await earlier.test_approval_once(server, real_hermes)
        await earlier.test_approval_deny(server, real_hermes)
        await earlier.test_cancel_mid_stream(server)
    finally:
        runner.stop()

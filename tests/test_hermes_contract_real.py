"""The Hermes contract scenarios against a real hermes-agent 0.19.0 gateway, held against the demo Hermes.

Every scenario of ``tests/hermes_scenarios.py`` runs against the real gateway (``real_hermes``: scripted
by ``tests/fake_llm.py``) and must pass; the same scenario then runs against the shared ``demo_hermes`` and
``compare_records`` must find no difference in event sequence, event keys and JSON types, or object keys,
apart from the documented extensions the demo adds (tool_call_id, args, clarify). Steps that need something
0.19.0 lacks are asserted on the double only; their test names say so.

The jobs scenario waits for the gateway's cron scheduler, which ticks every 60 s. So the module starts it
in a background thread as soon as the first test of the module runs (``real_jobs_scenario``, kept for the
session), lets the other tests of the gateway's group run meanwhile, and collects it in a test marked
``last_in_group``, which runs after all of them.

Finally, the client's four error kinds are checked against real failures: nothing listening
(``HermesUnavailable``), a wrong key (``HermesRejected`` 401), an unknown run (``HermesNotFound``) and a
server answering bodies of the wrong shape (``HermesUpstreamError``).
"""

import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import aclosing, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

import anyio
import anyio.to_thread
import pytest

from demo_hermes import DemoHermesServer
from hermes_client import (
    ClarifyRequest,
    HermesClient,
    HermesError,
    HermesNotFound,
    HermesRejected,
    HermesUnavailable,
    HermesUpstreamError,
    RunCompleted,
    RunEvent,
)
from tests.demo_hermes_server import client_for
from tests.hermes_scenarios import (
    DEMO_PROMPTS,
    REAL_PROMPTS,
    SCENARIOS,
    ScenarioRecord,
    auth_failure,
    compare_records,
    jobs_lifecycle,
    play_run,
    unique,
)
from tests.real_hermes import HERMES_VERSION, RealHermes

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.hermes,
    pytest.mark.live,
    pytest.mark.xdist_group("hermes"),
    pytest.mark.timeout(180),
]

WRONG_KEY: Final = "wrong-key-0123456789abcdef"
UNKNOWN_RUN_ID: Final = "run_" + "0" * 32
# The cron tick is 60 s and the job runs on the first tick after run_job; a little slack for the agent turn.
CRON_TIMEOUT_S: Final = 120.0
JOBS_JOIN_TIMEOUT_S: Final = CRON_TIMEOUT_S + 30.0
# The jobs scenario runs in the background (see real_jobs_scenario); the others run here, in this order.
FOREGROUND_SCENARIOS: Final = [name for name in SCENARIOS if name != "jobs_lifecycle"]


def real_client(real_hermes: RealHermes, *, api_key: str | None = None) -> HermesClient:
    return HermesClient(
        real_hermes.base_url,
        real_hermes.api_key if api_key is None else api_key,
        connect_timeout=5.0,
        request_timeout=15.0,
        stream_read_timeout=60.0,
    )


@pytest.fixture
async def real_hermes_client(real_hermes: RealHermes) -> AsyncIterator[HermesClient]:
    async with real_client(real_hermes) as client:
        yield client


async def drain_events(client: HermesClient, run_id: str) -> None:
    """Read a run's event stream to its end (or to the error it raises)."""
    async with aclosing(client.run_events(run_id)) as stream:
        async for _ in stream:
            pass


def restore_danger_dir(real_hermes: RealHermes) -> None:
    """Recreate what the fake LLM's DANGER command deletes (as fake_llm.prepare_scratch made it)."""
    (real_hermes.danger_dir / "sub").mkdir(parents=True, exist_ok=True)
    (real_hermes.danger_dir / "sub" / "keep.txt").write_text("delete me only if approved\n", encoding="utf-8")


def event_kinds(record: ScenarioRecord) -> dict[str, dict[str, str]]:
    return {event.name: event.fields for event in record.events}


DRIFTED: Final = f"the demo double drifted from hermes-agent {HERMES_VERSION}"


def assert_same_shape(real: ScenarioRecord, demo: ScenarioRecord, *, drifted: str = DRIFTED) -> None:
    """``compare_records`` finds no difference; ``drifted`` begins the message that says which demo and gateway."""
    assert real.scenario == demo.scenario
    problems = compare_records(real, demo)
    assert problems == [], (
        f"{drifted} in {real.scenario}:\n"
        + "\n".join(problems)
        + f"\nreal events: {event_kinds(real)}\nreal objects: {real.objects}"
        + f"\ndemo events: {event_kinds(demo)}\ndemo objects: {demo.objects}"
    )


# --- the jobs scenario, in the background -------------------------------------------------------------


class BackgroundScenario:
    """Runs one scenario against the real gateway in a thread of its own (its own event loop and client).

    ``result()`` waits for it and returns its record, or re-raises what failed it. ``cancel()`` stops it.
    """

    def __init__(
        self, name: str, real_hermes: RealHermes, play: Callable[[HermesClient], Awaitable[ScenarioRecord]]
    ) -> None:
        self.name = name
        self._real_hermes = real_hermes
        self._play = play
        self._cancel = threading.Event()
        self._record: ScenarioRecord | None = None
        self._error: BaseException | None = None
        self.started = time.monotonic()
        self.finished: float | None = None
        self._thread = threading.Thread(target=self._main, name=f"hermes-contract-{name}", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            anyio.run(self._run)
        except BaseException as exc:
            self._error = exc
        finally:
            self.finished = time.monotonic()

    async def _run(self) -> None:
        async with anyio.create_task_group() as tg:

            async def cancel_when_asked() -> None:
                while not self._cancel.is_set():
                    await anyio.sleep(0.1)
                tg.cancel_scope.cancel()

            tg.start_soon(cancel_when_asked)
            try:
                async with real_client(self._real_hermes) as client:
                    self._record = await self._play(client)
            except anyio.get_cancelled_exc_class():
                raise
            except BaseException as exc:  # pytest's Failed is a BaseException; result() re-raises it
                self._error = exc
            finally:
                tg.cancel_scope.cancel()

    @property
    def elapsed(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    def result(self, timeout: float) -> ScenarioRecord:
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.cancel()
            pytest.fail(f"the background {self.name} scenario did not finish within {timeout:.0f}s")
        if self._error is not None:
            raise self._error
        assert self._record is not None, f"the background {self.name} scenario was cancelled"
        return self._record

    def cancel(self, timeout: float = 10.0) -> None:
        self._cancel.set()
        self._thread.join(timeout)


@contextmanager
def jobs_scenario_in_background(hermes: RealHermes) -> Iterator[BackgroundScenario]:
    """The jobs scenario on ``hermes``, started now so its wait on the cron tick overlaps the module's other
    tests; cancelled on leaving."""

    async def play(client: HermesClient) -> ScenarioRecord:
        return await jobs_lifecycle(client, REAL_PROMPTS, cron_timeout=CRON_TIMEOUT_S)

    background = BackgroundScenario("jobs_lifecycle", hermes, play)
    try:
        yield background
    finally:
        background.cancel()


async def play_on_real_hermes(name: str, hermes: RealHermes, client: HermesClient) -> ScenarioRecord:
    """Play the foreground scenario ``name`` on a real gateway; for the approval scenarios, check the command
    really ran (``approval_once``) or really did not (``approval_deny``), and leave the scratch dir as it was."""
    if name.startswith("approval_"):
        restore_danger_dir(hermes)
    real = await SCENARIOS[name](client, REAL_PROMPTS)
    assert real.scenario == name
    assert real.events or real.objects
    if name == "approval_once":
        assert not hermes.danger_dir.exists(), "the approved command did not really run"
        restore_danger_dir(hermes)  # other real-Hermes tests of the session expect it
    elif name == "approval_deny":
        assert hermes.danger_dir.is_dir(), "the denied command ran anyway"
    return real


@pytest.fixture(scope="session", autouse=True)
def real_jobs_scenario(real_hermes: RealHermes) -> Iterator[BackgroundScenario]:
    """The real jobs scenario, started with the module's first test so its wait on the cron tick overlaps the
    rest of the group (its job is made by this client, so no server of another test owns or lists it)."""
    with jobs_scenario_in_background(real_hermes) as background:
        yield background


# --- 1 + 2: the scenarios on both targets ---------------------------------------------------------------


@pytest.mark.parametrize("name", FOREGROUND_SCENARIOS)
async def test_scenario_passes_on_real_hermes_and_the_demo_matches_it(
    name: str, real_hermes: RealHermes, real_hermes_client: HermesClient, demo_hermes: DemoHermesServer
) -> None:
    real = await play_on_real_hermes(name, real_hermes, real_hermes_client)
    async with client_for(demo_hermes) as demo_client:
        demo = await SCENARIOS[name](demo_client, DEMO_PROMPTS)
    assert_same_shape(real, demo)


async def test_auth_failure_on_real_hermes_and_the_demo_matches_it(
    real_hermes: RealHermes, demo_hermes: DemoHermesServer
) -> None:
    async with real_client(real_hermes, api_key=WRONG_KEY) as client:
        real = await auth_failure(client)
    assert real.objects["health"] == {"status": "string", "platform": "string", "version": "string"}
    async with client_for(demo_hermes, api_key=WRONG_KEY) as client:
        demo = await auth_failure(client)
    assert_same_shape(real, demo)


async def test_tool_call_ids_and_args_on_the_double_only_since_0_19_0_run_events_carry_none(
    real_hermes_client: HermesClient, demo_hermes_client: HermesClient
) -> None:
    """0.19.0's tool.started/tool.completed have no tool_call_id and no args (HERMES_API.md §2.3): the
    newer fields the demo sends can only be checked on the double; on the real gateway we check they
    are absent, so the day Hermes adds them this test says the extension list needs revisiting."""
    real = await SCENARIOS["tool_run"](real_hermes_client, REAL_PROMPTS)
    real_fields = {event.name: event.fields for event in real.events if event.name.startswith("tool.")}
    assert "tool_call_id" not in real_fields["tool.started"]
    assert "args" not in real_fields["tool.started"]
    assert "tool_call_id" not in real_fields["tool.completed"]

    demo = await SCENARIOS["tool_run"](demo_hermes_client, DEMO_PROMPTS)
    demo_fields = {event.name: event.fields for event in demo.events if event.name.startswith("tool.")}
    assert demo_fields["tool.started"]["tool_call_id"] == "string"
    assert demo_fields["tool.started"]["args"] == "object"
    assert demo_fields["tool.completed"]["tool_call_id"] == "string"


async def test_clarify_on_the_double_only_since_0_19_0_has_no_clarify_on_runs(
    real_hermes: RealHermes, real_hermes_client: HermesClient, demo_hermes_client: HermesClient
) -> None:
    """0.19.0 has no clarify tool for API-server runs, no clarify.request event and no
    ``POST /v1/runs/{id}/clarify`` route (HERMES_API.md §6): the clarify round trip exists on the double
    only. On the real gateway a clarify tool call just ends in a completed run without any clarify event."""
    demo_record = ScenarioRecord("clarify")
    answered: list[str] = []

    async def answer(event: RunEvent) -> None:
        if isinstance(event, ClarifyRequest):
            assert event.question
            assert event.choices
            result = await demo_hermes_client.respond_clarify(event.run_id, event.clarify_id, event.choices[0])
            assert result.resolved is True
            answered.append(event.choices[0])

    with anyio.fail_after(30):
        handle = await demo_hermes_client.create_run("/demo clarify")
        demo_events = await play_run(demo_hermes_client, handle.run_id, demo_record, answer)
    assert len(answered) == 1
    assert demo_record.collapsed_names()[0] == "clarify.request"
    assert isinstance(demo_events[-1], RunCompleted)
    assert answered[0] in demo_events[-1].output

    real_record = ScenarioRecord("clarify")
    prompt = unique("CLARIFY which environment")
    with anyio.fail_after(60):
        handle = await real_hermes_client.create_run(prompt)
        real_events = await play_run(real_hermes_client, handle.run_id, real_record)
        with pytest.raises(HermesNotFound):  # no such route in 0.19.0
            await real_hermes_client.respond_clarify(handle.run_id, "clarify_x", "staging")
    assert "clarify.request" not in real_record.names()
    assert isinstance(real_events[-1], RunCompleted), real_record.names()
    offered = [
        {tool["function"]["name"] for tool in body.get("tools", [])}
        for body in real_hermes.chat_requests()
        if prompt in json.dumps(body.get("messages"))
    ]
    assert offered, "the fake LLM never saw the clarify run"
    assert all("terminal" in names and "clarify" not in names for names in offered), offered


@pytest.mark.parametrize(
    "target",
    ["real", "demo"],
)
async def test_a_listed_session_without_messages_has_an_empty_string_preview(
    target: str, request: pytest.FixtureRequest
) -> None:
    """0.19.0 lists a session with no messages yet with ``"preview": ""`` (verbatim), not null."""
    if target == "real":
        client = real_client(request.getfixturevalue("real_hermes"))
    else:
        client = client_for(request.getfixturevalue("demo_hermes"))
    async with client:
        with anyio.fail_after(30):
            session = await client.create_session(title=unique("empty preview"))
            try:
                listed = await client.list_sessions(limit=200)
            finally:
                await client.delete_session(session.id)
    row = next(s for s in listed.data if s.id == session.id)
    assert row.message_count == 0
    assert row.preview == "", f"{target}: preview {row.preview!r}"


# --- 3: the client's error kinds against real failures ----------------------------------------------------


async def test_hermes_not_started_is_unavailable(hermes_down_base_url: str) -> None:
    attempts: dict[str, Callable[[HermesClient], Awaitable[object]]] = {
        "health": lambda client: client.health(),
        "create_run": lambda client: client.create_run("hi"),
        "get_run": lambda client: client.get_run(UNKNOWN_RUN_ID),
        "list_sessions": lambda client: client.list_sessions(),
        "list_jobs": lambda client: client.list_jobs(),
        "run_events": lambda client: drain_events(client, UNKNOWN_RUN_ID),
    }
    async with HermesClient(hermes_down_base_url, WRONG_KEY, connect_timeout=2.0, request_timeout=5.0) as client:
        with anyio.fail_after(30):
            for name, attempt in attempts.items():
                with pytest.raises(HermesUnavailable) as caught:
                    await attempt(client)
                assert caught.value.status is None, name


async def test_wrong_key_on_real_hermes_is_rejected_with_401(real_hermes: RealHermes) -> None:
    attempts: dict[str, Callable[[HermesClient], Awaitable[object]]] = {
        "create_run": lambda client: client.create_run("hi"),
        "get_run": lambda client: client.get_run(UNKNOWN_RUN_ID),
        "stop_run": lambda client: client.stop_run(UNKNOWN_RUN_ID),
        "list_sessions": lambda client: client.list_sessions(),
        "get_session": lambda client: client.get_session("no-such-session"),
        "list_jobs": lambda client: client.list_jobs(),
        "run_events": lambda client: drain_events(client, UNKNOWN_RUN_ID),
    }
    async with real_client(real_hermes, api_key=WRONG_KEY) as client:
        with anyio.fail_after(30):
            for name, attempt in attempts.items():
                with pytest.raises(HermesRejected) as caught:
                    await attempt(client)
                assert type(caught.value) is HermesRejected, f"{name}: a wrong key must not look like a 404"
                assert (caught.value.status, caught.value.code) == (401, "invalid_api_key"), name


async def test_unknown_run_on_real_hermes_is_not_found(real_hermes_client: HermesClient) -> None:
    client = real_hermes_client
    attempts: dict[str, Callable[[], Awaitable[object]]] = {
        "get_run": lambda: client.get_run(UNKNOWN_RUN_ID),
        "stop_run": lambda: client.stop_run(UNKNOWN_RUN_ID),
        "respond_approval": lambda: client.respond_approval(UNKNOWN_RUN_ID, "deny"),
        "run_events": lambda: drain_events(client, UNKNOWN_RUN_ID),
    }
    with anyio.fail_after(30):
        for name, attempt in attempts.items():
            with pytest.raises(HermesNotFound) as caught:
                await attempt()
            assert (caught.value.status, caught.value.code) == (404, "run_not_found"), name


class _MalformedHermes(BaseHTTPRequestHandler):
    """Answers like a Hermes gateway in status, but with bodies of the wrong shape."""

    def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._reply(200, b"<html>definitely not JSON</html>", "text/html")
        elif self.path.startswith("/api/sessions"):
            self._reply(200, json.dumps({"data": "not a list"}).encode())
        elif self.path.startswith("/v1/runs/"):
            self._reply(200, json.dumps({"run_id": 5, "status": None}).encode())
        else:
            self._reply(502, b"<html>Bad Gateway</html>", "text/html")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/v1/runs":
            self._reply(202, json.dumps({"unexpected": 1}).encode())
        else:
            self._reply(500, json.dumps({"error": {"message": "boom", "code": "internal"}}).encode())

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def malformed_hermes_url() -> Iterator[str]:
    """A tiny local HTTP server on 127.0.0.1 that answers with malformed bodies; stopped afterwards."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _MalformedHermes)
    thread = threading.Thread(target=server.serve_forever, name="malformed-hermes", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


async def test_malformed_bodies_are_upstream_errors(malformed_hermes_url: str) -> None:
    attempts: dict[str, Callable[[HermesClient], Awaitable[object]]] = {
        "health (not JSON)": lambda client: client.health(),
        "create_run ({'unexpected': 1})": lambda client: client.create_run("hi"),
        "get_run (wrong types)": lambda client: client.get_run(UNKNOWN_RUN_ID),
        "list_sessions (data not a list)": lambda client: client.list_sessions(),
        "list_jobs (502 HTML)": lambda client: client.list_jobs(),
        "stop_run (500)": lambda client: client.stop_run(UNKNOWN_RUN_ID),
    }
    async with HermesClient(malformed_hermes_url, "test-key-0123456789abcdef", request_timeout=5.0) as client:
        with anyio.fail_after(30):
            for name, attempt in attempts.items():
                with pytest.raises(HermesError) as caught:
                    await attempt(client)
                assert type(caught.value) is HermesUpstreamError, f"{name}: {caught.value!r}"


# --- last: the background jobs scenario ---------------------------------------------------------------


@pytest.mark.last_in_group
async def test_jobs_lifecycle_on_real_hermes_and_the_demo_matches_it(
    real_jobs_scenario: BackgroundScenario, demo_hermes: DemoHermesServer
) -> None:
    """Job create/list/get/patch/pause/resume/run/delete, and the cron session of the run (started early)."""
    real = await anyio.to_thread.run_sync(real_jobs_scenario.result, JOBS_JOIN_TIMEOUT_S)
    assert real.scenario == "jobs_lifecycle"
    assert real.objects["cron_session"]["source"] == "string"
    async with client_for(demo_hermes) as demo_client:
        demo = await jobs_lifecycle(demo_client, DEMO_PROMPTS, cron_timeout=30)
    assert_same_shape(real, demo)

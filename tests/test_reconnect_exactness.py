"""Reconnect exactness, as a property: whatever a conversation goes through, a client that took a snapshot
(`conversation.open`) at any point and applied the live events after it, as the spec tells clients to,
holds what a fresh snapshot shows. On SQLite, on PostgreSQL, and in cluster mode (`ClusterHub`).

A driver client runs turns (answers, tool calls, approvals asked and answered or left pending, runs
cancelled); an observer takes its snapshots in between, at points hypothesis chooses, some while a run is
under way. At the end (every run ended or waiting for a decision) the observer's state is compared with a
fresh snapshot's: the active run (its id, message and text), its tool states, the pending approvals, the
attachments, and the assistant's answers in order. (The user's own turns reach other clients only through
history, by the spec, so they are not part of what a client builds.)
"""

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.live_server import LiveServer
from tests.ws_client import Frame, PhebyClient

pytestmark = [pytest.mark.anyio, pytest.mark.live, pytest.mark.both_engines, pytest.mark.in_cluster]

STEPS = st.lists(
    st.sampled_from(["answer", "answer later", "tool", "approval", "open", "cancel", "pause"]),
    min_size=2,
    max_size=8,
)


class ClientState:
    """What a client holds of one conversation: a snapshot, then the live events after it applied."""

    def __init__(self, conversation_id: str, snapshot: Frame) -> None:
        self.conversation_id = conversation_id
        run = snapshot["run"]
        self.run: dict[str, Any] | None = (
            None if run is None else {"run_id": run["run_id"], "message_id": run["message_id"], "text": run["text"]}
        )
        self.tools = {t["tool_call_id"]: (t["tool_name"], t["status"]) for t in snapshot["tools"]}
        self.approvals = {a["approval_id"] for a in snapshot["approvals"]}
        self.clarifications = {c["clarify_id"] for c in snapshot["clarifications"]}
        self.attachments = {a["attachment_id"] for a in snapshot["attachments"]}
        self.answers = [m["text"] for m in snapshot["messages"] if m["role"] == "assistant"]

    def apply(self, frame: Frame) -> None:
        kind = frame["type"]
        if frame.get("conversation_id", self.conversation_id) != self.conversation_id:
            return
        if kind == "run.accepted":
            self.tools = {}
        elif kind == "message.start":
            self.run = {"run_id": frame["run_id"], "message_id": frame["message_id"], "text": ""}
        elif kind == "message.delta" and self.run is not None and self.run["message_id"] == frame["message_id"]:
            self.run["text"] = frame["text"]
        elif kind == "message.complete" and frame.get("kind") != "notice":
            self.answers.append(frame["text"])
            if self.run is not None and self.run["message_id"] == frame["message_id"]:
                self.run["text"] = frame["text"]
        elif kind == "run.finished":
            self.run = None  # its tools stay: a snapshot lists the last run's until the next starts
        elif kind == "tool.event":
            self.tools[frame["tool_call_id"]] = (frame["tool_name"], frame["status"])
        elif kind == "approval.request":
            self.approvals.add(frame["approval_id"])
        elif kind == "approval.resolved":
            self.approvals.discard(frame["approval_id"])
        elif kind == "clarify.request":
            self.clarifications.add(frame["clarify_id"])
        elif kind == "clarify.resolved":
            self.clarifications.discard(frame["clarify_id"])
        elif kind == "attachment.added":
            self.attachments.add(frame["attachment"]["attachment_id"])

    def view(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "tools": self.tools,
            "approvals": self.approvals,
            "clarifications": self.clarifications,
            "attachments": self.attachments,
            "answers": self.answers,
        }


class Scenario:
    def __init__(self, driver: PhebyClient, observer: PhebyClient, conversation_id: str) -> None:
        self.driver = driver
        self.observer = observer
        self.conversation_id = conversation_id
        self.active: str | None = None  # the driver's run under way
        self.pending_approval: str | None = None
        self.snapshot_at: int | None = None  # where in the observer's frames its last snapshot is
        self.turns = 0

    async def step(self, step: str) -> None:
        if step == "open":
            opened = await self.observer.request(
                "conversation.open", "conversation.history", conversation_id=self.conversation_id
            )
            self.snapshot_at = self.observer.frames.index(opened)
        elif step == "pause":
            await asyncio.sleep(0.05)
        elif step == "cancel":
            if self.active is not None and self.pending_approval is None:
                await self.driver.send("run.cancel", conversation_id=self.conversation_id, run_id=self.active)
                await self.finished()
        elif self.pending_approval is not None:
            await self.driver.send("approval.respond", approval_id=self.pending_approval, choice="once")
            self.pending_approval = None
            await self.finished()
        else:
            await self.finished()
            self.turns += 1
            text = {
                "answer": f"turn {self.turns}",
                "answer later": "/demo slow 12",  # 12 ticks 50 ms apart: snapshots come mid-run
                "tool": "/demo tool",
                "approval": "/demo approve",
            }[step]
            accepted = await self.driver.request(
                "chat.send", "run.accepted", conversation_id=self.conversation_id, text=text
            )
            assert accepted["type"] == "run.accepted", accepted
            self.active = accepted["run_id"]
            if step == "approval":
                request = await self.driver.expect("approval.request", run_id=self.active)
                self.pending_approval = request["approval_id"]
            elif step in ("answer", "tool"):
                await self.finished()

    async def finished(self) -> None:
        """Wait for the driver's run under way (if any) to end."""
        if self.active is not None:
            await self.driver.expect("run.finished", timeout=20, run_id=self.active)
            self.active = None

    async def settle(self) -> None:
        """Let every run end, but one waiting for its approval; then every event has reached the observer."""
        if self.pending_approval is None:
            await self.finished()
        await self.observer.request("ping", "pong")


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,  # the same scenarios every run: a failure is a defect to find, never a coin
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=STEPS)
async def test_a_snapshot_plus_the_events_after_it_is_a_fresh_snapshot(
    live_server: LiveServer, steps: list[str]
) -> None:
    driver = await PhebyClient.connect(live_server.ws_url, live_server.secret)
    observer = await PhebyClient.connect(live_server.ws_url, live_server.secret)
    try:
        created = await driver.request("conversation.create", "conversation.created")
        conversation_id = created["conversation_id"]
        scenario = Scenario(driver, observer, conversation_id)
        for step in ["open", *steps]:  # a first snapshot at the start; each later "open" takes the place of it
            await scenario.step(step)
        await scenario.settle()
        assert scenario.snapshot_at is not None
        built = ClientState(conversation_id, observer.frames[scenario.snapshot_at])
        for frame in observer.frames[scenario.snapshot_at + 1 :]:
            built.apply(frame)
        fresh = await observer.request("conversation.open", "conversation.history", conversation_id=conversation_id)
        assert built.view() == ClientState(conversation_id, fresh).view(), steps
        if scenario.pending_approval is not None:  # leave nothing waiting in the shared demo Hermes
            await driver.send("approval.respond", approval_id=scenario.pending_approval, choice="deny")
            await scenario.finished()
    finally:
        await driver.close()
        await observer.close()

"""Crash safety of runs: what `bench/run_crash.py` and `tests/test_run_crash_safety.py` both run.

`run_run_crash_rounds` starts the demo Hermes in a process of its own (`tests.demo_hermes_process`), as the
0.19.0 gateway (one consumer per stream) and/or as the 0.22-era one (`--replay`: numbered events, the stream
reopened), and `pheby serve` against it (`tests.crash_safety.ServerProcess`, local disk, SQLite, loopback).
Each gateway gets its share of the rounds, with a data dir and a Hermes of its own (a run journaled against
one gateway can only be carried on against it).

A round: several clients (`PhebyClient` connections of the owner) over a few conversations start runs of
mixed kinds (`/demo slow`, `/demo approve`, `/demo approve 1` which asks after 1 s, `/demo clarify`, plain
text, `/demo chunks ...`), one at a time per conversation, a new one as soon as the conversation is free; each
`approval.request` and `clarify.request` is answered by one of the clients after a random pause (an approval
"once" or "deny", or "deny" when that is its only choice; a clarification one of its choices or free text).
At a moment drawn from the seed the server gets SIGKILL (by PID); it is restarted on the same data dir, the
clients reconnect, open every conversation and answer what is pending, and then:

- no acknowledged answer is lost: an answer counts as acknowledged once an `approval.resolved` or
  `clarify.resolved` carrying the responder's request_id (and `accepted: true`) arrived; the run's final
  answer must then say so (`Approved (once). ...` / `Denied. I did not run the command.` / `You chose: X`);
- no run stays active: every run a client saw accepted (and any run a snapshot shows that a cut-off
  `chat.send` made) ends within `end_bound` seconds of the restart: a `run.finished` some connection saw,
  or a snapshot of its conversation without it;
- a run ends once: no connection sees two `run.finished` of one run, and no run is finished by two
  server processes;
- some acknowledged answers (a share drawn per decision) are sent again after the restart: the second
  answer must be `approval_not_found` / `clarify_not_found`;
- every finished run's final answer is one the agent can give for its kind (`wrong answers`);
- once the last round's runs ended, the journal (`active_runs`, `run_decisions`) is empty.

The final answer of a run is its `message.complete` (`draft-<run id>`) as some connection saw it, else the
assistant message after its (unique) user text in the conversation's transcript.

The seed draws the load (kinds, pauses, which client sends) and the kill moments; the server's timing, and so
what exactly a kill cuts off, varies. Every process is started here and stopped by its PID: the server with
SIGKILL at each round's kill and SIGTERM (then SIGKILL) at the end, the demo Hermes with SIGTERM (then
SIGKILL), also when a check fails.
"""

import asyncio
import contextlib
import itertools
import random
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from demo_hermes.agent import SLOW_DELTAS
from tests.crash_safety import SECRET, ServerProcess
from tests.demo_hermes_process import DemoHermesProcess
from tests.live_server import free_port
from tests.ws_client import Frame, PhebyClient

GATEWAYS: Final[dict[str, tuple[str, ...]]] = {"one-consumer": (), "replay": ("--replay",)}
KINDS: Final = ("slow", "approve", "approve-later", "clarify", "plain", "chunks")
KIND_WEIGHTS: Final = (2, 3, 2, 3, 1, 1)
SLOW_ANSWER: Final = "".join(f"tick {i} " for i in range(SLOW_DELTAS)).strip()
APPROVED: Final = "Approved (once). I removed /tmp/build-output."
DENIED: Final = "Denied. I did not run the command."
APPROVAL_TIMED_OUT: Final = "Denied: nobody answered the approval request in time, so I did not run the command."
CLARIFY_TIMED_OUT: Final = "No answer came, so I did not deploy anything."
CHOSEN: Final = "You chose: "
NOT_FOUND: Final = {"approval": "approval_not_found", "clarify": "clarify_not_found"}
REQUEST_TIMEOUT: Final = 15.0
POLL: Final = 0.02
RESNAPSHOT_SECONDS: Final = 2.0
DRAIN_SECONDS: Final = 2.0
_request_ids = itertools.count(1)


@dataclass(frozen=True)
class RunCrashConfig:
    rounds: int = 15
    seed: int = 0
    gateways: tuple[str, ...] = ("one-consumer", "replay")  # the rounds are split between them, in this order
    clients: int = 3
    conversations: int = 4
    kill_after: tuple[float, float] = (1.0, 4.0)  # seconds of load before the kill, uniformly drawn
    answer_after: tuple[float, float] = (0.0, 2.0)  # a client's pause before it answers a decision
    send_pause: tuple[float, float] = (0.0, 0.3)  # a conversation's pause between a run's end and the next send
    second_answer_share: float = 0.5  # acknowledged answers sent again after the restart
    end_bound: float = 30.0  # every run ends within this many seconds of the restart
    # Hermes's own approval and clarify timeout: what an agent waits on that no server saw (a 0.19.0 gateway
    # says it waits on an approval, never on a clarification) ends within the bound.
    hermes_timeout: float = 20.0
    # Hermes takes an answer (the agent goes on) this long before it replies, and makes a run this long before
    # it answers the create: a kill often falls between the two, after Hermes acted and before the client heard.
    hermes_answer_delay: float = 0.3
    hermes_create_delay: float = 0.2
    delta_delay: float = 0.01

    def schedule(self) -> list[tuple[str, list[int]]]:
        """Each gateway and its rounds (numbered 1.. over all of them); the first ones get the odd rounds out."""
        share, extra = divmod(self.rounds, len(self.gateways))
        rounds = iter(range(1, self.rounds + 1))
        return [
            (gateway, list(itertools.islice(rounds, share + (i < extra))))
            for i, gateway in enumerate(self.gateways)
            if share + (i < extra)
        ]


@dataclass
class Answer:
    value: str
    request_id: str
    lifetime: int
    second: bool = False  # sent again after a restart, to be refused
    outcome: str = "sent"  # acknowledged, an error code, "not accepted", "cut off", "no reply"


@dataclass
class DecisionRecord:
    decision_id: str
    kind: Literal["approval", "clarify"]
    run_id: str
    conversation_id: str
    choices: list[str] | None
    asked_in: int  # the server process (lifetime) that asked it first
    gateway: str
    answers: list[Answer] = field(default_factory=list)
    expired: bool = False  # resolved without an answer of ours (accepted: false)
    pending_again: bool = False  # shown pending after its answer had been acknowledged

    @property
    def unseen(self) -> bool:
        return self.kind == "approval" and self.choices == ["deny"]

    def acknowledged(self) -> Answer | None:
        return next((a for a in self.answers if a.outcome == "acknowledged" and not a.second), None)

    def answering(self, lifetime: int) -> bool:
        return any(a.lifetime == lifetime and a.outcome in ("sent", "acknowledged") for a in self.answers)


@dataclass
class RunRecord:
    run_id: str
    conversation_id: str
    kind: str
    text: str
    round: int
    gateway: str
    seen_accepted: bool  # False: a cut-off chat.send's run, found in a snapshot after the restart
    decisions: list[str] = field(default_factory=list)
    finished_in: dict[int, str] = field(default_factory=dict)  # server lifetime → the status it finished with
    ended: bool = False
    ended_how: str = ""
    completes: list[str] = field(default_factory=list)  # the texts of its message.complete frames
    candidates: list[str] = field(default_factory=list)  # its final answer (more than one: see `final_texts`)
    checked: bool = False
    left_active: bool = False

    @property
    def status(self) -> str:
        statuses = set(self.finished_in.values())
        if not statuses:
            return "without a run.finished seen (a snapshot showed it ended)"
        return statuses.pop() if len(statuses) == 1 else "/".join(sorted(statuses))


@dataclass
class RunCrashResult:
    seed: int
    gateways: tuple[str, ...]
    rounds: int = 0
    runs: dict[str, RunRecord] = field(default_factory=dict)
    decisions: dict[str, DecisionRecord] = field(default_factory=dict)
    lost_answers: list[str] = field(default_factory=list)
    left_active: list[str] = field(default_factory=list)
    duplicate_finishes: list[str] = field(default_factory=list)
    second_answers_taken: list[str] = field(default_factory=list)
    wrong_answers: list[str] = field(default_factory=list)
    journal_left: list[str] = field(default_factory=list)
    restart_failures: list[str] = field(default_factory=list)
    info: Counter[str] = field(default_factory=Counter)
    slowest_end: float = 0.0  # the longest a round's runs took to end after its restart
    seconds: float = 0.0

    def answers(self, *, second: bool) -> list[Answer]:
        return [a for d in self.decisions.values() for a in d.answers if a.second == second]

    def failures(self) -> dict[str, list[str]]:
        return {
            "lost acknowledged answers": self.lost_answers,
            "runs left active": self.left_active,
            "duplicate run.finished": self.duplicate_finishes,
            "second answers taken": self.second_answers_taken,
            "wrong answers": self.wrong_answers,
            "journal rows left": self.journal_left,
            "failed restarts": self.restart_failures,
        }

    def missed_targets(self) -> list[str]:
        return [f"{len(items)} {what}" for what, items in self.failures().items() if items]

    def report(self) -> list[str]:
        runs = self.runs.values()
        kinds = Counter(r.kind for r in runs)
        statuses = Counter(r.status for r in runs if r.ended)
        firsts, seconds = self.answers(second=False), self.answers(second=True)
        outcomes = Counter(a.outcome for a in firsts)
        second_outcomes = Counter(a.outcome for a in seconds)
        acknowledged = [d for d in self.decisions.values() if d.acknowledged() is not None]
        by_kind = Counter(d.kind for d in acknowledged)
        later = sum(1 for d in acknowledged if (a := d.acknowledged()) is not None and a.lifetime > d.asked_in)
        lines = [
            f"seed {self.seed}: {self.rounds} rounds (SIGKILL, restart, check) over {', '.join(self.gateways)}"
            f" in {self.seconds:.1f} s",
            f"runs started: {sum(r.seen_accepted for r in runs)} seen accepted"
            f" ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))});"
            f" {sum(not r.seen_accepted for r in runs)} more found after a restart (a cut-off chat.send's)",
            f"  ended: {', '.join(f'{s} {n}' for s, n in sorted(statuses.items()))};"
            f" the slowest round's runs all ended {self.slowest_end:.1f} s after its restart",
            f"decisions asked: {len(self.decisions)} ({sum(d.unseen for d in self.decisions.values())} asked"
            f" unseen, deny-only); answered: {len(firsts)}; acknowledged: {len(acknowledged)}"
            f" (approval {by_kind['approval']}, clarify {by_kind['clarify']})",
            f"  answers' outcomes: {', '.join(f'{o} {n}' for o, n in sorted(outcomes.items()))};"
            f" acknowledged by a later process than the one that asked: {later}",
            f"  acknowledged answers sent again after a restart: {len(seconds)}"
            f" ({', '.join(f'{o} {n}' for o, n in sorted(second_outcomes.items())) or 'none'})",
        ]
        lines += [f"{what}: {len(items)}" for what, items in self.failures().items()]
        if self.info:
            lines.append("  info: " + ", ".join(f"{what} {n}" for what, n in sorted(self.info.items())))
        for what, items in self.failures().items():
            lines.extend(f"  {what}: {item}" for item in items[:10])
            lines.extend([f"  ... and {len(items) - 10} more"] if len(items) > 10 else [])
        missed = self.missed_targets()
        lines.append(
            "targets (0 lost answers, 0 runs left active, 0 duplicate finishes, 0 second answers taken,"
            " 0 wrong answers, 0 journal rows left, 0 failed restarts): "
            + ("met" if not missed else "NOT met: " + ", ".join(missed))
        )
        return lines


def run_text(kind: str, tag: str) -> str:
    return {
        "slow": f"/demo slow {tag}",
        "approve": f"/demo approve {tag}",
        "approve-later": f"/demo approve 1 {tag}",
        "clarify": f"/demo clarify {tag}",
        "plain": f"hello {tag}",
        "chunks": f"/demo chunks one |two |three {tag}",
    }[kind]


def answer_is_possible(kind: str, text: str, answer: str) -> bool:
    """Whether the agent can end a run of this kind (and user text) with this answer."""
    match kind:
        case "slow":
            return answer == SLOW_ANSWER
        case "approve" | "approve-later":
            return answer in (APPROVED, DENIED, APPROVAL_TIMED_OUT)
        case "clarify":
            return answer.startswith(CHOSEN) or answer == CLARIFY_TIMED_OUT
        case "plain":
            return answer == f"You said: {text}"
        case "chunks":
            return answer == "one two three " + text.rsplit(" ", 1)[1]
    return True  # a run found after a restart whose kind is unknown


def answer_for(decision: DecisionRecord, value: str) -> str:
    if decision.kind == "clarify":
        return CHOSEN + value
    return APPROVED if value == "once" else DENIED


# --- one server process and its connections ------------------------------------------------------------------


class Lifetime:
    """One `pheby serve` process, the clients connected to it, and the tasks working through them."""

    def __init__(self, index: int, server: ServerProcess) -> None:
        self.index = index
        self.server = server
        self.clients: list[PhebyClient] = []
        self.read: list[int] = []
        self.finished: list[Counter[str]] = []  # per connection: run.finished frames per run id
        self.replies: dict[str, list[Frame]] = {}  # request_id → every frame carrying it
        self.tasks: set[asyncio.Task[None]] = set()
        self.killed = False

    async def connect(self, count: int) -> None:
        for _ in range(count):
            self.clients.append(await PhebyClient.connect(self.server.ws_url, SECRET))
            self.read.append(0)
            self.finished.append(Counter())

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def closed(self, client: PhebyClient) -> bool:
        return client.ws.close_code is not None or client._reader.done()

    async def call(self, client: PhebyClient, type_: str, reply: str, **fields: Any) -> Frame | None:
        return await self.request(client, type_, reply, f"rc{next(_request_ids)}", fields)

    async def request(
        self, client: PhebyClient, type_: str, reply: str, request_id: str, fields: dict[str, Any]
    ) -> Frame | None:
        """Send and wait for the reply (or error) carrying `request_id`; None when the connection closed or no
        reply came in time. The frames are read by `Probe.absorb` (an absorber task calls it meanwhile)."""
        try:
            await client.send(type_, request_id=request_id, **fields)
        except Exception:
            return None
        connection = self.clients.index(client)
        deadline = time.monotonic() + REQUEST_TIMEOUT
        while time.monotonic() < deadline:
            for frame in self.replies.get(request_id, []):
                if frame.get("type") in (reply, "error"):
                    return frame
            if self.closed(client) and len(client.frames) == self.read[connection]:
                return None
            await asyncio.sleep(POLL)
        return None

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for client in self.clients:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.ws.close(), 2)


# --- the probe -----------------------------------------------------------------------------------------------


@dataclass
class PendingSend:
    conversation_id: str
    kind: str
    text: str
    round: int


class Probe:
    """The ledger, the load and the checks of one gateway's rounds (one data dir, one demo Hermes)."""

    def __init__(self, config: RunCrashConfig, result: RunCrashResult, gateway: str) -> None:
        self.config = config
        self.result = result
        self.gateway = gateway
        self.conversations: list[str] = []
        self.sends: dict[str, PendingSend] = {}  # request_id → a chat.send
        self.unanswered_send: dict[str, PendingSend] = {}  # conversation → a chat.send the kill cut off
        self.answers: dict[str, tuple[DecisionRecord, Answer]] = {}  # request_id → an answer of ours
        self.finished_by: dict[str, set[int]] = {}  # run id → the lifetimes that finished it
        self.orphans: set[str] = set()  # cut-off chat.sends whose turn is in the transcript
        self.round = 0
        self.rng = random.Random(f"{config.seed}/{gateway}/answers")

    @property
    def runs(self) -> dict[str, RunRecord]:
        return self.result.runs

    @property
    def decisions(self) -> dict[str, DecisionRecord]:
        return self.result.decisions

    def where(self, run_id: str) -> str:
        run = self.runs.get(run_id)
        kind = f"{run.kind} {run.text!r}, " if run else ""
        return f"seed {self.config.seed}, round {self.round} ({self.gateway}): run {run_id} ({kind}"

    # --- reading frames ------------------------------------------------------------------------------------

    def absorb(self, life: Lifetime) -> None:
        """Take every frame the connections received since the last call into the ledger."""
        for n, client in enumerate(life.clients):
            frames = client.frames[life.read[n] :]
            life.read[n] += len(frames)
            for frame in frames:
                self._frame(life, n, frame)

    def _frame(self, life: Lifetime, connection: int, frame: Frame) -> None:
        kind = frame.get("type")
        request_id = frame.get("request_id")
        if isinstance(request_id, str):
            life.replies.setdefault(request_id, []).append(frame)
        match kind:
            case "run.accepted" if isinstance(request_id, str) and request_id in self.sends:
                send = self.sends[request_id]
                if frame["run_id"] not in self.runs:
                    self.runs[frame["run_id"]] = RunRecord(
                        frame["run_id"], send.conversation_id, send.kind, send.text, send.round, self.gateway, True
                    )
                self.unanswered_send.pop(send.conversation_id, None)
            case "run.finished":
                run_id = frame["run_id"]
                life.finished[connection][run_id] += 1
                if life.finished[connection][run_id] == 2:
                    self.result.duplicate_finishes.append(
                        f"{self.where(run_id)}two run.finished on one connection of process {life.index})"
                    )
                lifetimes = self.finished_by.setdefault(run_id, set())
                if life.index not in lifetimes and lifetimes:
                    self.result.duplicate_finishes.append(
                        f"{self.where(run_id)}finished by processes {sorted(lifetimes)} and again by {life.index})"
                    )
                lifetimes.add(life.index)
                run = self.runs.get(run_id)
                if run is not None:
                    run.finished_in.setdefault(life.index, frame["status"])
                    self._ended(run, "run.finished")
            case "message.complete":
                message_id = str(frame.get("message_id", ""))
                run = self.runs.get(message_id.removeprefix("draft-"))
                if run is not None:
                    run.completes.append(frame["text"])
            case "approval.request" | "clarify.request":
                self.asked(life, frame)
            case "approval.resolved" | "clarify.resolved":
                decision_id = frame.get("approval_id") or frame.get("clarify_id")
                ours = self.answers.get(request_id) if isinstance(request_id, str) else None
                if ours is not None and ours[1].outcome in ("sent", "cut off", "no reply"):
                    ours[1].outcome = "acknowledged" if frame.get("accepted") else "not accepted"
                elif not frame.get("accepted") and decision_id in self.decisions:
                    self.decisions[str(decision_id)].expired = True
            case "error" if isinstance(request_id, str) and request_id in self.answers:
                answer = self.answers[request_id][1]
                if answer.outcome in ("sent", "cut off", "no reply"):
                    answer.outcome = str(frame.get("error", {}).get("code", "error"))

    def _ended(self, run: RunRecord, how: str) -> None:
        if not run.ended:
            run.ended, run.ended_how = True, how

    def asked(self, life: Lifetime, request: Frame) -> None:
        """A decision seen pending (a request frame, or a snapshot's list): answer it unless that is under way."""
        is_approval = "approval_id" in request
        decision_id = str(request["approval_id"] if is_approval else request["clarify_id"])
        decision = self.decisions.get(decision_id)
        if decision is None:
            decision = DecisionRecord(
                decision_id,
                "approval" if is_approval else "clarify",
                request["run_id"],
                request["conversation_id"],
                request.get("choices"),
                life.index,
                self.gateway,
            )
            self.decisions[decision_id] = decision
            run = self.runs.get(decision.run_id)
            if run is not None:
                run.decisions.append(decision_id)
        if life.killed or decision.answering(life.index):
            return
        acknowledged = decision.acknowledged()
        if acknowledged is not None:
            if acknowledged.lifetime < life.index and not decision.pending_again:
                decision.pending_again = True  # the restarted server asks again what it was answered before
                self.result.lost_answers.append(
                    f"{self.where(decision.run_id)}{decision.kind} {decision_id}): answered {acknowledged.value!r}"
                    f" (acknowledged by process {acknowledged.lifetime}), pending again in process {life.index}"
                )
                life.spawn(self.answer(life, decision, acknowledged.value, second=True))
            return
        life.spawn(self.answer(life, decision))

    def choose(self, decision: DecisionRecord) -> str:
        if decision.kind == "approval":
            return "deny" if decision.unseen else self.rng.choice(("once", "once", "deny"))
        if decision.choices and self.rng.random() < 0.7:
            return self.rng.choice(decision.choices)
        return f"free text {self.rng.randrange(10**6)}"

    async def answer(
        self, life: Lifetime, decision: DecisionRecord, value: str | None = None, *, second: bool = False
    ) -> None:
        """Answer a decision (after a pause) from one of the clients, or send an acknowledged answer again."""
        if not second:
            await asyncio.sleep(self.rng.uniform(*self.config.answer_after))
            if decision.expired or decision.acknowledged() is not None or decision.answering(life.index):
                return
        if life.killed:
            return
        value = value if value is not None else self.choose(decision)
        request_id = f"rc{next(_request_ids)}"
        answer = Answer(value, request_id, life.index, second=second)
        decision.answers.append(answer)
        self.answers[request_id] = (decision, answer)
        client = self.rng.choice(life.clients)
        if decision.kind == "approval":
            fields = {"approval_id": decision.decision_id, "choice": value}
            reply = await life.request(client, "approval.respond", "approval.resolved", request_id, fields)
        else:
            fields = {"clarify_id": decision.decision_id, "response": value}
            reply = await life.request(client, "clarify.respond", "clarify.resolved", request_id, fields)
        if reply is None and answer.outcome == "sent":
            answer.outcome = "cut off" if life.killed else "no reply"

    # --- the load ------------------------------------------------------------------------------------------

    def active_runs(self, conversation_id: str) -> list[RunRecord]:
        return [r for r in self.runs.values() if r.conversation_id == conversation_id and not r.ended]

    async def drive(self, life: Lifetime, conversation_id: str, rng: random.Random, serials: Counter[str]) -> None:
        """Start runs in one conversation, one at a time, until the kill."""
        while not life.killed:
            if self.active_runs(conversation_id) or conversation_id in self.unanswered_send:
                await asyncio.sleep(0.05)
                continue
            await asyncio.sleep(rng.uniform(*self.config.send_pause))
            kind = rng.choices(KINDS, KIND_WEIGHTS)[0]
            serials[conversation_id] += 1
            tag = f"#r{self.round}c{self.conversations.index(conversation_id)}n{serials[conversation_id]}"
            send = PendingSend(conversation_id, kind, run_text(kind, tag), self.round)
            client = rng.choice(life.clients)
            request_id = f"rc{next(_request_ids)}"
            self.sends[request_id] = send
            self.unanswered_send[conversation_id] = send
            fields = {"conversation_id": conversation_id, "text": send.text}
            reply = await life.request(client, "chat.send", "run.accepted", request_id, fields)
            if reply is None:
                if not life.killed:
                    self.result.info["chat.send without a reply"] += 1
                return  # the kill: the send's fate is settled by the snapshot after the restart
            if reply["type"] == "error":
                self.unanswered_send.pop(conversation_id, None)
                code = str(reply.get("error", {}).get("code"))
                self.result.info[f"chat.send refused ({code})"] += 1
                if code == "run_active":  # a run no client knew of: a snapshot shows it
                    await self.open(life, client, conversation_id)
                await asyncio.sleep(0.2)

    async def open(self, life: Lifetime, client: PhebyClient, conversation_id: str) -> Frame | None:
        """Open the conversation: its run (one no client saw accepted is the cut-off send's), the runs of it no
        longer active (ended), its pending decisions (answered). The reply, or None."""
        snapshot = await life.call(client, "conversation.open", "conversation.history", conversation_id=conversation_id)
        if snapshot is None or snapshot["type"] != "conversation.history":
            if snapshot is not None:
                self.result.info[f"conversation.open refused ({snapshot.get('error', {}).get('code')})"] += 1
            return None
        shown = snapshot.get("run")
        if shown is not None and shown["run_id"] not in self.runs:
            send = self.unanswered_send.pop(conversation_id, None)
            kind, text = (send.kind, send.text) if send is not None else ("unknown", "")
            self.runs[shown["run_id"]] = RunRecord(
                shown["run_id"], conversation_id, kind, text, self.round, self.gateway, False
            )
        elif shown is None:
            self.unanswered_send.pop(conversation_id, None)  # it made no run, or one that ended already
        for run in self.active_runs(conversation_id):
            if shown is None or shown["run_id"] != run.run_id:
                self._ended(run, "snapshot")
        for request in [*snapshot.get("approvals", []), *snapshot.get("clarifications", [])]:
            self.asked(life, request)
        return snapshot

    async def absorber(self, life: Lifetime) -> None:
        while True:
            self.absorb(life)
            await asyncio.sleep(POLL)

    # --- the rounds ----------------------------------------------------------------------------------------

    async def create_conversations(self, life: Lifetime) -> None:
        for n in range(self.config.conversations):
            reply = await life.call(life.clients[0], "conversation.create", "conversation.created", name=f"runs {n}")
            if reply is None or reply["type"] != "conversation.created":
                raise RuntimeError(f"conversation.create answered {reply}")
            self.conversations.append(reply["conversation_id"])

    async def load_then_kill(self, life: Lifetime, kill_after: float, rng: random.Random) -> tuple[int, int]:
        """Drive the load for `kill_after` seconds, then SIGKILL the server; (runs active, decisions pending)."""
        serials: Counter[str] = Counter()
        for n, conversation_id in enumerate(self.conversations):
            life.spawn(self.drive(life, conversation_id, random.Random(f"{rng.random()}/{n}"), serials))
        await asyncio.sleep(kill_after)
        life.killed = True  # nothing runs between these lines: whatever fails from here on is the kill's
        life.server.kill()
        await life.server.reap()
        deadline = time.monotonic() + DRAIN_SECONDS  # what the server sent before it died is still read
        while time.monotonic() < deadline and not all(life.closed(c) for c in life.clients):
            await asyncio.sleep(POLL)
        self.absorb(life)
        await life.close()
        self.absorb(life)
        for _, answer in self.answers.values():
            if answer.lifetime == life.index and answer.outcome == "sent":
                answer.outcome = "cut off"
        active = [r for r in self.runs.values() if not r.ended]
        pending = [d for r in active for d in r.decisions if self.decisions[d].acknowledged() is None]
        return len(active), len(pending)

    async def second_answers(self, life: Lifetime) -> None:
        """Send some answers acknowledged by an earlier process again: each must be refused as not found."""
        for decision in list(self.decisions.values()):
            first = decision.acknowledged()
            if (
                first is None
                or decision.gateway != self.gateway
                or first.lifetime != life.index - 1
                or decision.pending_again
                or self.rng.random() >= self.config.second_answer_share
            ):
                continue
            await self.answer(life, decision, first.value, second=True)
            again = decision.answers[-1]
            if again.outcome not in (NOT_FOUND[decision.kind], "cut off"):
                self.result.second_answers_taken.append(
                    f"{self.where(decision.run_id)}{decision.kind} {decision.decision_id}): answered"
                    f" {first.value!r} (acknowledged by process {first.lifetime}), again after the restart:"
                    f" {again.outcome}"
                )

    async def recover(self, life: Lifetime, up_at: float) -> float:
        """After a restart: open every conversation, answer what is pending, send some acknowledged answers again,
        and wait (bounded) for every run to end; the seconds from the restart until they had."""
        await self.second_answers(life)
        deadline = up_at + self.config.end_bound
        wanted = list(self.conversations)  # first every conversation, then those with a run not ended
        while True:
            await asyncio.gather(*(self.open(life, self.rng.choice(life.clients), c) for c in wanted))
            next_open = time.monotonic() + RESNAPSHOT_SECONDS
            while time.monotonic() < min(next_open, deadline) and any(not r.ended for r in self.runs.values()):
                await asyncio.sleep(0.1)
            wanted = sorted({r.conversation_id for r in self.runs.values() if not r.ended})
            if not wanted:
                return time.monotonic() - up_at
            if time.monotonic() >= deadline:
                break
        for run in self.runs.values():
            if not run.ended and not run.left_active:
                run.left_active = True
                pending = [d for d in run.decisions if self.decisions[d].acknowledged() is None]
                self.result.left_active.append(
                    f"{self.where(run.run_id)}accepted in round {run.round}): still active"
                    f" {self.config.end_bound:g} s after the restart; decisions {run.decisions}, unanswered {pending}"
                )
        return time.monotonic() - up_at

    async def final_texts(self, life: Lifetime) -> None:
        """The final answer of each ended run not checked yet: its message.complete, else its transcript's.

        In the transcript a run's answer is an assistant message after its (unique) user text and before the
        user text of the conversation's next run (the clients start one only once a run ended). A turn of a
        run Hermes made for a `chat.send` the kill cut off (never journaled, so never shown) may stand between
        them: then each assistant message there is a candidate."""
        for run in self.runs.values():
            if run.completes and not run.checked:
                run.candidates = [run.completes[-1]]
                if len(set(run.completes)) > 1:
                    self.result.info["runs with differing message.complete texts"] += 1
        need = {r.conversation_id for r in self.runs.values() if r.ended and not r.checked and not r.completes}
        ours = {r.text for r in self.runs.values() if r.text}
        for conversation_id in need:
            snapshot = await self.open(life, life.clients[0], conversation_id)
            messages = snapshot["messages"] if snapshot is not None else []
            self.orphans.update(
                m["text"] for m in messages if m["role"] == "user" and m["text"] in self.cut_off_texts()
            )
            for run in self.runs.values():
                if run.conversation_id != conversation_id or run.completes or not run.ended or run.checked:
                    continue
                at = next((i for i, m in enumerate(messages) if m["role"] == "user" and m["text"] == run.text), None)
                if at is None:
                    continue
                for message in messages[at + 1 :]:
                    if message["role"] == "user" and message["text"] in ours:
                        break
                    if message["role"] == "assistant":
                        run.candidates.append(message["text"])
                if len(run.candidates) > 1:
                    self.result.info["answers read from a transcript with another turn between"] += 1

    def cut_off_texts(self) -> set[str]:
        """The texts of the chat.sends no client saw accepted."""
        made = {r.text for r in self.runs.values()}
        return {send.text for send in self.sends.values() if send.text not in made}

    def check(self) -> None:
        """Every ended run not checked yet: its acknowledged answers, its final answer."""
        for run in self.runs.values():
            if not run.ended or run.checked:
                continue
            run.checked = True
            candidates = run.candidates
            possible = [c for c in candidates if run.kind == "unknown" or answer_is_possible(run.kind, run.text, c)]
            if not candidates:
                self.result.info["runs whose final answer was not found"] += 1
            elif not possible:
                self.result.wrong_answers.append(
                    f"{self.where(run.run_id)}{run.status}, ended by {run.ended_how}): final answer"
                    f" {' / '.join(c[:120] for c in candidates)!r}"
                )
            if any(c in (APPROVAL_TIMED_OUT, CLARIFY_TIMED_OUT) for c in possible):
                self.result.info["runs that waited out Hermes's own timeout"] += 1
            for decision_id in run.decisions:
                decision = self.decisions[decision_id]
                acknowledged = decision.acknowledged()
                if acknowledged is None:
                    continue
                expected = answer_for(decision, acknowledged.value)
                if expected not in candidates:
                    self.result.lost_answers.append(
                        f"{self.where(run.run_id)}{run.status}, ended by {run.ended_how}): {decision.kind}"
                        f" {decision_id} answered {acknowledged.value!r}, acknowledged by process"
                        f" {acknowledged.lifetime} (request {acknowledged.request_id}); final answer"
                        f" {' / '.join(candidates) or 'not found'!r}, not {expected!r}"
                    )

    def journal_rows(self, data_dir: Path) -> list[str]:
        connection = sqlite3.connect(f"file:{data_dir / 'pheby.sqlite3'}?mode=ro", uri=True, timeout=10)
        try:
            runs = [row[0] for row in connection.execute("SELECT run_id FROM active_runs")]
            decisions = [row[0] for row in connection.execute("SELECT decision_id FROM run_decisions")]
        finally:
            connection.close()
        return [f"{self.gateway}: active_runs {r}" for r in runs] + [
            f"{self.gateway}: run_decisions {d}" for d in decisions
        ]


async def _phase(
    config: RunCrashConfig,
    result: RunCrashResult,
    gateway: str,
    rounds: list[int],
    work_dir: Path,
    progress: Callable[[str], None],
) -> None:
    """One gateway's rounds: its demo Hermes, its data dir, its servers; each stopped by PID before this returns."""
    hermes = DemoHermesProcess(
        work_dir / f"demo-hermes-{gateway}.log",
        "--delta-delay",
        str(config.delta_delay),
        "--approval-timeout",
        str(config.hermes_timeout),
        "--answer-delay",
        str(config.hermes_answer_delay),
        "--create-delay",
        str(config.hermes_create_delay),
        *GATEWAYS[gateway],
    )
    servers: list[ServerProcess] = []
    env = {"HERMES_URL": "", "HERMES_API_KEY": ""}
    data_dir = work_dir / f"data-{gateway}"
    lives: list[Lifetime] = []

    def start(port: int) -> ServerProcess:
        server = ServerProcess(data_dir, port, work_dir / f"server-{gateway}-{len(servers) + 1}.log", env_extra=env)
        servers.append(server)
        return server

    try:
        hermes.start()
        env.update({"HERMES_URL": hermes.base_url, "HERMES_API_KEY": hermes.api_key})
        probe = Probe(config, result, gateway)
        server = start(free_port())
        await server.wait_up()  # the first start is no restart: if it fails, there is nothing to test
        life = Lifetime(1, server)
        lives.append(life)
        await life.connect(config.clients)
        life.spawn(probe.absorber(life))
        await probe.create_conversations(life)
        for round_ in rounds:
            probe.round = round_
            rng = random.Random(f"{config.seed}/{round_}")
            kill_after = rng.uniform(*config.kill_after)
            active, pending = await probe.load_then_kill(life, kill_after, rng)
            restarted: ServerProcess | None = None
            began = time.monotonic()
            for attempt, port in enumerate((server.port, free_port()), 1):  # a second try on another port
                candidate = start(port)
                try:
                    await candidate.wait_up()
                except RuntimeError as exc:
                    result.restart_failures.append(f"round {round_} ({gateway}), attempt {attempt}: {exc}")
                    candidate.stop()
                    continue
                restarted = candidate
                break
            if restarted is None:
                break
            server = restarted
            up_at = time.monotonic()
            life = Lifetime(life.index + 1, server)
            lives.append(life)
            await life.connect(config.clients)
            life.spawn(probe.absorber(life))
            ended_after = await probe.recover(life, up_at)
            result.slowest_end = max(result.slowest_end, ended_after)
            await probe.final_texts(life)
            probe.check()
            result.rounds += 1
            progress(
                f"round {round_} ({gateway}): killed after {kill_after:.2f} s with {active} runs active and"
                f" {pending} decisions pending; up again in {up_at - began:.1f} s, the runs ended"
                f" {ended_after:.1f} s later; runs {len(result.runs)}, acknowledged answers"
                f" {sum(d.acknowledged() is not None for d in result.decisions.values())}; lost"
                f" {len(result.lost_answers)}, left active {len(result.left_active)}, duplicate finishes"
                f" {len(result.duplicate_finishes)}, second answers taken {len(result.second_answers_taken)},"
                f" wrong answers {len(result.wrong_answers)}"
            )
        if all(r.ended for r in result.runs.values() if r.gateway == gateway):
            result.journal_left += probe.journal_rows(data_dir)
        for conversation_id in probe.conversations:  # the cut-off sends whose run Hermes made all the same
            snapshot = await probe.open(life, life.clients[0], conversation_id)
            texts = {m["text"] for m in snapshot["messages"] if m["role"] == "user"} if snapshot else set()
            probe.orphans |= texts & probe.cut_off_texts()
        result.info[f"chat.sends cut off by a kill: {gateway}"] += len(probe.cut_off_texts())
        result.info[f"of them made a Hermes run never shown (its turn in the transcript): {gateway}"] += len(
            probe.orphans
        )
    finally:
        for life in lives:
            await life.close()
        for server in servers:
            server.stop()
        hermes.stop()


async def run_run_crash_rounds(
    config: RunCrashConfig, work_dir: Path, progress: Callable[[str], None] = lambda _: None
) -> RunCrashResult:
    """Run `config.rounds` rounds of runs, SIGKILL, restart and checks, split between `config.gateways`.

    Every process started (servers, demo Hermes) is stopped by its PID before this returns or raises."""
    started = time.monotonic()
    result = RunCrashResult(seed=config.seed, gateways=config.gateways)
    try:
        for gateway, rounds in config.schedule():
            await _phase(config, result, gateway, rounds, work_dir, progress)
    finally:
        result.seconds = time.monotonic() - started
    return result

"""Pending decisions of a run: approvals and clarifications share one lifecycle.

    ask ──► waiting ──begin_answer──► answering ──resolve──► resolved
               ▲  │                      │
               │  └──expire──► resolved  └──answer_not_taken──► waiting

A client's answer on its way to Hermes (answering) is resolved by that answer's reply, not by the
run: when the run ends first, the decision resolves with the responder's answer and request_id.
A waiting decision the run leaves behind expires (an approval as a deny, a clarification as
`expired`). Each resolution yields the one `*.resolved` event to broadcast.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from msgspec import UNSET, UnsetType

from pheby.protocol import frames as ev

Kind = Literal["approval", "clarify"]
Resolved = ev.ApprovalResolved | ev.ClarifyResolved


def resolved_id(event: Resolved) -> str:
    return event.approval_id if isinstance(event, ev.ApprovalResolved) else event.clarify_id


class Answer(NamedTuple):
    """A client's answer: the approval choice or the clarification's response, and its request_id."""

    value: str
    request_id: str | UnsetType


@dataclass
class Decision:
    """One question to the user, from Hermes's stream or from the companion plugin."""

    id: str
    request: ev.ApprovalRequest | ev.ClarifyRequest
    held_id: str = ""  # the id Hermes (or the plugin) knows a clarification by
    pattern_keys: list[str] = field(default_factory=list)  # an approval's patterns, for "session" answers
    by_plugin: bool = False
    # Asked while no server read the stream (Hermes said it waits, not for what): it can only be denied.
    unseen: bool = False
    answer: Answer | None = None

    @property
    def kind(self) -> Kind:
        return "approval" if isinstance(self.request, ev.ApprovalRequest) else "clarify"

    @property
    def answering(self) -> bool:
        return self.answer is not None


class Decisions:
    """The pending decisions of one run, oldest first."""

    def __init__(self) -> None:
        self._pending: dict[str, Decision] = {}

    def __contains__(self, decision_id: object) -> bool:
        return decision_id in self._pending

    def __iter__(self) -> Iterator[Decision]:
        return iter(list(self._pending.values()))

    def __bool__(self) -> bool:
        return bool(self._pending)

    def has(self, kind: Kind) -> bool:
        return any(d.kind == kind for d in self._pending.values())

    def requests(self, kind: Kind) -> list[ev.ApprovalRequest | ev.ClarifyRequest]:
        return [d.request for d in self._pending.values() if d.kind == kind]

    def get(self, decision_id: str, kind: Kind) -> Decision | None:
        decision = self._pending.get(decision_id)
        return decision if decision is not None and decision.kind == kind else None

    def ask(self, decision: Decision) -> None:
        self._pending[decision.id] = decision

    def begin_answer(self, decision_id: str, kind: Kind, answer: Answer) -> Decision | None:
        """Mark a decision as being answered; None when unknown, stale, or another answer is on its way."""
        decision = self.get(decision_id, kind)
        if decision is None or decision.answering:
            return None
        decision.answer = answer
        return decision

    def answer_not_taken(self, decision_id: str) -> None:
        """Hermes never took the answer: the decision waits for an answer again."""
        decision = self._pending.get(decision_id)
        if decision is not None:
            decision.answer = None

    def resolve(self, decision_id: str, answer: Answer) -> Resolved | None:
        """The answer was taken: the decision is resolved with it (None if it already was)."""
        decision = self._pending.pop(decision_id, None)
        if decision is None:
            return None
        if decision.kind == "approval":
            return ev.ApprovalResolved(
                approval_id=decision_id, choice=answer.value, accepted=True, request_id=answer.request_id
            )
        return ev.ClarifyResolved(clarify_id=decision_id, accepted=True, request_id=answer.request_id)

    def expire(self, decision_id: str, *, request_id: str | UnsetType = UNSET) -> Resolved | None:
        """Nobody's answer counts (any more): an approval is denied, a clarification expired."""
        decision = self._pending.pop(decision_id, None)
        if decision is None:
            return None
        if decision.kind == "approval":
            return ev.ApprovalResolved(approval_id=decision_id, choice="deny", accepted=False, request_id=request_id)
        return ev.ClarifyResolved(clarify_id=decision_id, accepted=False, expired=True, request_id=request_id)

    def settle_all(self) -> list[Resolved]:
        """The run ended: each decision being answered keeps its responder's answer, the rest expire."""
        resolved: list[Resolved] = []
        for decision in self:
            event = (
                self.resolve(decision.id, decision.answer) if decision.answer is not None else self.expire(decision.id)
            )
            if event is not None:
                resolved.append(event)
        return resolved

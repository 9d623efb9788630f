"""The explicit phase of one run, and the one table of the moves between phases.

    starting ──► running ◄──► awaiting_decision
        │           │              │
        │           ▼              ▼
        │       cancelling ◄───────┘
        ▼           ▼
      finished ◄────┘   (every phase but finished may end)

A run in `cancelling` stays there until it is finished: a decision resolving meanwhile can't bring
it back to `running`. The wire status of a run's snapshot is derived from the phase here too.
"""

from typing import Final, Literal

Phase = Literal["starting", "running", "awaiting_decision", "cancelling", "finished"]

ALLOWED: Final[dict[Phase, frozenset[Phase]]] = {
    "starting": frozenset({"running", "finished"}),
    "running": frozenset({"awaiting_decision", "cancelling", "finished"}),
    "awaiting_decision": frozenset({"running", "cancelling", "finished"}),
    "cancelling": frozenset({"finished"}),
    "finished": frozenset(),
}


class RunPhase:
    """One run's phase; `move` applies a transition if the table allows it."""

    __slots__ = ("current",)

    def __init__(self) -> None:
        self.current: Phase = "starting"

    def can(self, target: Phase) -> bool:
        return target in ALLOWED[self.current]

    def move(self, target: Phase) -> bool:
        """Move to `target` if allowed (True), else stay (False): a late, stale move is no error."""
        if target == self.current:
            return True
        if not self.can(target):
            return False
        self.current = target
        return True

    @property
    def finished(self) -> bool:
        return self.current == "finished"

    def wire_status(self, *, approvals_pending: bool, clarifications_pending: bool) -> str:
        """The `run.status` a snapshot shows (the protocol's words)."""
        if self.current == "cancelling":
            return "cancelling"
        if self.current == "awaiting_decision":
            if approvals_pending:
                return "waiting_for_approval"
            if clarifications_pending:
                return "waiting_for_clarification"
        return "running"

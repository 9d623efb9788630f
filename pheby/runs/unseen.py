"""Approvals nobody here saw: what Hermes's status says while the server reads no stream of a run.

Hermes 0.19.0 keeps one stream per run and drops it with its reader: after the server's restart (or a
broken stream) the run is followed by `GET /v1/runs/{id}`, which says that the agent waits on an
approval, never for what. A decision journaled before the stop stays pending and is answered as
ever. When Hermes waits and no approval of the run is waiting here, the agent asked while no server
read its stream: the clients are told, honestly, and may only deny it (never approve a command
nobody saw); else it runs out on Hermes's own timeout. Once Hermes no longer waits, approvals still
pending here are stale: Hermes answered them itself (its timeout), so they expire.

`UnseenApprovals.seen` judges one status. A wait is taken for unseen only when two polls at least
`CONFIRM_SECONDS` apart both show it: right after a client's answer Hermes may say it waits a moment
longer, before the agent reads the answer.
"""

import time
from collections.abc import Callable
from typing import Final, Literal

from pheby.protocol import frames as ev
from pheby.runs.reader import TERMINAL_STATUSES

CONFIRM_SECONDS: Final = 1.0
WAITING: Final = "waiting_for_approval"
UNSEEN_COMMAND: Final = "(not seen)"
UNSEEN_DESCRIPTION: Final = (
    "The agent asked for an approval while the server was not reading its run, so what it wants to run "
    "is unknown here. It can only be denied; unanswered, it runs out on Hermes's own timeout."
)

Verdict = Literal["ask_unseen", "expire_waiting"] | None


class UnseenApprovals:
    def __init__(self, confirm_after: float = CONFIRM_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._confirm_after = confirm_after
        self._clock = clock
        self._waiting_since: float | None = None

    def seen(self, status: str, *, approval_waiting: bool) -> Verdict:
        """What one status means, given whether an approval of the run waits for a client here."""
        if status in TERMINAL_STATUSES:
            return None
        if status != WAITING:
            self._waiting_since = None
            return "expire_waiting" if approval_waiting else None
        if approval_waiting:
            self._waiting_since = None
            return None
        now = self._clock()
        if self._waiting_since is None:
            self._waiting_since = now
            return None
        if now - self._waiting_since < self._confirm_after:
            return None
        self._waiting_since = None
        return "ask_unseen"


def unseen_request(approval_id: str, session_key: str, conversation_id: str, run_id: str) -> ev.ApprovalRequest:
    return ev.ApprovalRequest(
        approval_id=approval_id,
        session_key=session_key,
        conversation_id=conversation_id,
        run_id=run_id,
        command=UNSEEN_COMMAND,
        description=UNSEEN_DESCRIPTION,
        choices=["deny"],
    )

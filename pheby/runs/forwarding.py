"""What a client may ask of a run that another process owns (stop it; answer its approval or its
clarification; show it in a snapshot), taken to that process (`RunOwners`) and done there just as if asked
there (`pheby.runs.commands.carry_out`).
"""

from abc import ABC, abstractmethod

import msgspec

from pheby.errors import NotFound
from pheby.protocol import frames as ev


class CancelRun(msgspec.Struct, frozen=True, kw_only=True, tag="cancel"):
    account_id: str
    conversation_id: str
    run_id: str
    once_made: bool = False  # a run Hermes has not made yet is stopped once made (`RunEngine.cancel`)


class AnswerApproval(msgspec.Struct, frozen=True, kw_only=True, tag="approval"):
    account_id: str
    approval_id: str
    choice: str
    request_id: str | None


class AnswerClarify(msgspec.Struct, frozen=True, kw_only=True, tag="clarify"):
    account_id: str
    clarify_id: str
    response: str
    request_id: str | None


class SnapshotRun(msgspec.Struct, frozen=True, kw_only=True, tag="snapshot"):
    account_id: str
    conversation_id: str


class RemoteSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A conversation's run as its owner sees it (`conversation.history`'s run part), and the position in
    the account's event log it holds every event of (`Hub.settled_position`)."""

    run: ev.RunSnapshot | None = None
    tools: list[ev.ToolState] = msgspec.field(default_factory=list)
    approvals: list[ev.ApprovalRequest] = msgspec.field(default_factory=list)
    clarifications: list[ev.ClarifyRequest] = msgspec.field(default_factory=list)
    position: int = 0


NO_RUN = RemoteSnapshot()

RunCommand = CancelRun | AnswerApproval | AnswerClarify | SnapshotRun


class RunOwners(ABC):
    """The processes that own runs, as one that doesn't reaches them."""

    @abstractmethod
    async def forward(self, owner: str, command: RunCommand) -> RemoteSnapshot | None:
        """Have the process `owner` (a run lease's holder) carry the command out; what it answered (a
        snapshot's). Raises what it raised there (a `PhebyError`), or `Unavailable` when it did not answer
        in time."""


class NoOtherOwners(RunOwners):
    """One process per database: a run that is not here is nobody's (any left by a stopped process was
    taken over at start-up)."""

    async def forward(self, owner: str, command: RunCommand) -> RemoteSnapshot | None:
        if isinstance(command, SnapshotRun):
            return NO_RUN
        raise NotFound("No such active run")

"""Carrying out here a command another process took for a run this one owns (`pheby.runs.forwarding`)."""

from msgspec import UNSET, UnsetType

from pheby.protocol.hub import Hub
from pheby.runs.engine import RunManager
from pheby.runs.forwarding import (
    NO_RUN,
    AnswerApproval,
    AnswerClarify,
    CancelRun,
    RemoteSnapshot,
    RunCommand,
    SnapshotRun,
)


async def carry_out(runs: RunManager, hub: Hub, command: RunCommand) -> RemoteSnapshot | None:
    """Do it as if its client had asked here; raises what that raises. Never forwarded again: a run no longer
    here is `not_found` (or, in a snapshot, no run)."""
    match command:
        case SnapshotRun(account_id=account_id, conversation_id=conversation_id):
            position = await hub.settled_position(account_id)
            # From here to the return, no await: the run as every event of this process up to `position` left it.
            run = runs.active(conversation_id)
            if run is None or run.account.id != account_id:
                return NO_RUN
            snapshot, tools, approvals, clarifications = runs.snapshot(conversation_id)
            return RemoteSnapshot(
                run=snapshot, tools=tools, approvals=approvals, clarifications=clarifications, position=position
            )
        case CancelRun(account_id=account_id, conversation_id=conversation_id, run_id=run_id, once_made=once_made):
            await runs.cancel(account_id, conversation_id, run_id, once_made=once_made, forwarded=True)
        case AnswerApproval(account_id=account_id, approval_id=approval_id, choice=choice, request_id=request_id):
            await runs.decision_desk.respond_approval(
                account_id, approval_id, choice, _unset_if_none(request_id), forwarded=True
            )
        case AnswerClarify(account_id=account_id, clarify_id=clarify_id, response=response, request_id=request_id):
            await runs.decision_desk.respond_clarify(
                account_id, clarify_id, response, _unset_if_none(request_id), forwarded=True
            )
    return None


def _unset_if_none(request_id: str | None) -> str | UnsetType:
    return UNSET if request_id is None else request_id

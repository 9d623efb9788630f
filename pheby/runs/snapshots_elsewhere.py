"""`conversation.open` on this process for a run another process owns: the run part of the snapshot asked of
its owner (`SnapshotRun`), taken there right after every event of that process up to a log position reached
the log. Here it is used once this process has delivered the account's events up to that position and none
of the conversation's after it: then it holds exactly the run's events this client got before the reply, as
a snapshot of a run owned here does. Else it is asked again (a run busy with events), a few times.
"""

import logging
from typing import Final

from pheby.errors import Unavailable
from pheby.protocol.hub import Hub
from pheby.runs.engine import RunManager
from pheby.runs.forwarding import RemoteSnapshot, SnapshotRun

log = logging.getLogger("pheby.runs")

TRIES: Final = 3


async def settled_with_snapshot_elsewhere(
    runs: RunManager, hub: Hub, account_id: str, conversation_id: str
) -> RemoteSnapshot | None:
    """`hub.settled`, with the conversation's run as the process that owns it sees it; None when its run is
    here, or there is none, or its owner does not answer (stalled: its run is taken over within a lease).
    The caller's last await before its reply: from the return to the reply, no await."""
    snapshot: RemoteSnapshot | None = None
    for _ in range(TRIES):
        snapshot, reached = await _asked(runs, hub, account_id, conversation_id)
        await hub.settled(account_id)
        if snapshot is None or (reached and not hub.delivered_after(account_id, snapshot.position, conversation_id)):
            return snapshot
    log.warning(
        "conversation %s: its run kept changing while its snapshot was taken; sent as last seen", conversation_id
    )
    return snapshot


async def _asked(
    runs: RunManager, hub: Hub, account_id: str, conversation_id: str
) -> tuple[RemoteSnapshot | None, bool]:
    """The owner's snapshot, and whether this process has delivered the account's events up to its position."""
    if runs.active(conversation_id) is not None:
        return None, True  # here: no await, the snapshot is read at the reply
    owned = await runs.owner_elsewhere(account_id, conversation_id)
    if owned is None:
        return None, True
    try:
        snapshot = await runs.owners.forward(
            owned.owner, SnapshotRun(account_id=account_id, conversation_id=conversation_id)
        )
    except Unavailable:
        log.warning("conversation %s: its run's owner did not answer; the snapshot shows no run", conversation_id)
        return None, True
    if snapshot is None or snapshot.run is None:
        return None, True
    return snapshot, await hub.reached(account_id, snapshot.position)

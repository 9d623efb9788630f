"""`run.cancel` — stops the Hermes run; the run's one `run.finished` (cancelled) follows.

Hermes takes about a second to confirm (longer when it hangs), and waiting for it would hold up
this connection's other messages, so the cancel goes on in the background and answers for itself:
the requester gets the run's `run.finished`, or an error with its request_id (`not_found` when
Hermes can no longer interrupt the run).
"""

import asyncio

from handlers.ws.support.context import WsContext, error_for, rid
from handlers.ws.support.messages import ClientMessage
from pheby.errors import NotFound


class RunCancel(ClientMessage, frozen=True, tag="run.cancel"):
    conversation_id: str
    run_id: str


async def handle(ctx: WsContext, msg: RunCancel) -> None:
    run = ctx.services.runs.active(msg.conversation_id)
    if run is not None and (run.run_id != msg.run_id or run.account.id != ctx.account.id):
        raise NotFound("No such active run")
    # Not here: another process may own it (the cancel goes there), or nobody (`not_found`, answered below).
    ctx.services.background(asyncio.create_task(_cancel(ctx, msg), name=f"cancel-{msg.run_id}"))


async def _cancel(ctx: WsContext, msg: RunCancel) -> None:
    try:
        await ctx.services.runs.cancel(ctx.account.id, msg.conversation_id, msg.run_id)
    except Exception as exc:  # noqa: BLE001 - whatever went wrong, the requester is answered
        ctx.reply(error_for(exc, rid(msg.request_id)))

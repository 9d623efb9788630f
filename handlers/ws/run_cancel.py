"""`run.cancel` — stops the Hermes run; the run's one `run.finished` (cancelled) follows."""

import asyncio

from handlers.ws.context import WsContext
from handlers.ws.messages import ClientMessage
from pheby.errors import NotFound


class RunCancel(ClientMessage, frozen=True, tag="run.cancel"):
    conversation_id: str
    run_id: str


async def handle(ctx: WsContext, msg: RunCancel) -> None:
    runs = ctx.services.runs
    run = runs.active(msg.conversation_id)
    if run is None or run.run_id != msg.run_id or run.account.id != ctx.account.id:
        raise NotFound("No such active run")
    # Hermes confirms within about a second; waiting here would hold up this connection's other messages.
    task = asyncio.create_task(runs.cancel(ctx.account.id, msg.conversation_id, msg.run_id))
    done, _ = await asyncio.wait({task}, timeout=0.5)
    if done:
        task.result()  # a stale run surfaces as not_found
    else:
        ctx.services.background(task)

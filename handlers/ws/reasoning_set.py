"""`reasoning.set` → `reasoning.changed` reply and broadcast (global); invalid effort → `bad_request`."""

from handlers.ws.context import WsContext, rid
from handlers.ws.messages import ClientMessage
from pheby.events import ReasoningChanged


class ReasoningSet(ClientMessage, frozen=True, tag="reasoning.set"):
    effort: str
    conversation_id: str | None = None


async def handle(ctx: WsContext, msg: ReasoningSet) -> None:
    if msg.conversation_id is not None:
        await ctx.services.conversations.get(ctx.account.id, msg.conversation_id)
    await ctx.services.models.set_effort(ctx.account, msg.effort, conversation_scoped=msg.conversation_id is not None)
    ctx.reply(ReasoningChanged(effort=msg.effort, scope="global", request_id=rid(msg.request_id)))
    ctx.broadcast(ReasoningChanged(effort=msg.effort, scope="global"))

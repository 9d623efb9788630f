"""`model.set` → `model.changed` reply and broadcast (global); per-conversation → `not_implemented`."""

from handlers.ws.context import WsContext, rid
from handlers.ws.messages import ClientMessage
from pheby.events import ModelChanged


class ModelSet(ClientMessage, frozen=True, tag="model.set"):
    model: str
    provider: str | None = None
    conversation_id: str | None = None


async def handle(ctx: WsContext, msg: ModelSet) -> None:
    if msg.conversation_id is not None:
        await ctx.services.conversations.get(ctx.account.id, msg.conversation_id)
    provider = await ctx.services.models.set_model(
        ctx.account, msg.model, msg.provider, conversation_scoped=msg.conversation_id is not None
    )
    ctx.reply(ModelChanged(model=msg.model, provider=provider, scope="global", request_id=rid(msg.request_id)))
    ctx.broadcast(ModelChanged(model=msg.model, provider=provider, scope="global"))

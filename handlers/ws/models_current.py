"""`models.current` → `model.current`: a conversation's own model (companion plugin), else the global one."""

from msgspec import UNSET

from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage
from pheby.protocol.frames import ModelCurrent


class ModelsCurrent(ClientMessage, frozen=True, tag="models.current"):
    conversation_id: str | None = None


async def handle(ctx: WsContext, msg: ModelsCurrent) -> None:
    view = await ctx.services.conversation_settings.model_view(ctx.account, msg.conversation_id)
    ctx.reply(
        ModelCurrent(
            request_id=rid(msg.request_id),
            model=view.model,
            provider=view.provider,
            scope=view.scope,
            conversation_id=msg.conversation_id if msg.conversation_id is not None else UNSET,
        )
    )

"""`models.current` → `model.current` (always the global model: 0.19.0 has no per-conversation one)."""

from msgspec import UNSET

from handlers.ws.context import WsContext, rid
from handlers.ws.messages import ClientMessage
from pheby.events import ModelCurrent


class ModelsCurrent(ClientMessage, frozen=True, tag="models.current"):
    conversation_id: str | None = None


async def handle(ctx: WsContext, msg: ModelsCurrent) -> None:
    if msg.conversation_id is not None:
        await ctx.services.conversations.get(ctx.account.id, msg.conversation_id)
    _, model, provider = await ctx.services.models.options(ctx.account)
    ctx.reply(
        ModelCurrent(
            request_id=rid(msg.request_id),
            model=model,
            provider=provider,
            scope="global",
            conversation_id=msg.conversation_id if msg.conversation_id is not None else UNSET,
        )
    )

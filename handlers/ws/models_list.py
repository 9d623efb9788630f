"""`models.list` → `models.snapshot` from Hermes's own picker data (the dashboard API)."""

from handlers.ws.context import WsContext, rid
from handlers.ws.messages import ClientMessage
from pheby.events import ModelsSnapshot
from pheby.models import MODEL_EFFORTS


class ModelsList(ClientMessage, frozen=True, tag="models.list"):
    conversation_id: str | None = None


async def handle(ctx: WsContext, msg: ModelsList) -> None:
    if msg.conversation_id is not None:
        await ctx.services.conversations.get(ctx.account.id, msg.conversation_id)
    providers, model, provider = await ctx.services.models.options(ctx.account)
    ctx.reply(
        ModelsSnapshot(
            request_id=rid(msg.request_id),
            providers=providers,
            current_model=model,
            current_provider=provider,
            supported_reasoning_efforts=MODEL_EFFORTS,
            scope="global",  # Hermes 0.19.0 has no per-conversation model
        )
    )

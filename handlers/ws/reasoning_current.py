"""`reasoning.current` → `reasoning.snapshot`: a conversation's own effort (companion plugin), else the global one.

`none` means thinking is off.
"""

from msgspec import UNSET

from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage
from pheby.hermes.model_choice import REASONING_EFFORTS
from pheby.protocol.frames import ReasoningSnapshot


class ReasoningCurrent(ClientMessage, frozen=True, tag="reasoning.current"):
    conversation_id: str | None = None


async def handle(ctx: WsContext, msg: ReasoningCurrent) -> None:
    effort, scope = await ctx.services.conversation_settings.effort_view(ctx.account, msg.conversation_id)
    ctx.reply(
        ReasoningSnapshot(
            request_id=rid(msg.request_id),
            effort=effort,
            enabled=effort != "none",
            scope=scope,
            supported_efforts=REASONING_EFFORTS,
            conversation_id=msg.conversation_id if msg.conversation_id is not None else UNSET,
        )
    )

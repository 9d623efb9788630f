"""`model.set` → `model.changed` reply and broadcast: global, or for one conversation (companion plugin).

A global change is for the account's own Hermes only (the owner's rule is in `pheby.hermes.model_choice`).
"""

from typing import Annotated

import msgspec

from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage
from pheby.protocol.frames import ModelChanged

# A model or provider name: one line of printable text, of a length Hermes's config can hold.
# \A...\Z, not ^...$: msgspec searches the pattern, and $ also matches before a final newline.
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=256, pattern=r"\A[^\x00-\x1f\x7f]+\Z")]


class ModelSet(ClientMessage, frozen=True, tag="model.set"):
    model: Name
    provider: Name | None = None
    conversation_id: str | None = None


async def handle(ctx: WsContext, msg: ModelSet) -> None:
    if msg.conversation_id is None:
        provider = await ctx.services.models.set_model(ctx.account, msg.model, msg.provider)
        changed = ModelChanged(model=msg.model, provider=provider, scope="global")
    else:
        own_provider = await ctx.services.conversation_settings.set_model(
            ctx.account, msg.conversation_id, msg.model, msg.provider
        )
        changed = ModelChanged(
            model=msg.model, provider=own_provider, scope="conversation", conversation_id=msg.conversation_id
        )
    ctx.reply(msgspec.structs.replace(changed, request_id=rid(msg.request_id)))
    ctx.broadcast(changed)

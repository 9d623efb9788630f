"""`reasoning.set` → `reasoning.changed` reply and broadcast: global, or for one conversation (companion plugin).

A global change is for the account's own Hermes only (the owner's rule is in `pheby.hermes.model_choice`).

An invalid effort is `bad_request`.
"""

import msgspec

from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage
from pheby.protocol.frames import ReasoningChanged


class ReasoningSet(ClientMessage, frozen=True, tag="reasoning.set"):
    effort: str
    conversation_id: str | None = None


async def handle(ctx: WsContext, msg: ReasoningSet) -> None:
    if msg.conversation_id is None:
        await ctx.services.models.set_effort(ctx.account, msg.effort)
        changed = ReasoningChanged(effort=msg.effort, scope="global")
    else:
        await ctx.services.conversation_settings.set_effort(ctx.account, msg.conversation_id, msg.effort)
        changed = ReasoningChanged(effort=msg.effort, scope="conversation", conversation_id=msg.conversation_id)
    ctx.reply(msgspec.structs.replace(changed, request_id=rid(msg.request_id)))
    ctx.broadcast(changed)

"""`chat.send` → `run.accepted`, `message.start`, then the run's events (see `pheby.runs`).

The engine's `send` reserves the conversation's run slot, checks the attachments, starts the run
and claims them once it is accepted, so a `run_active` (or any failure to start) leaves them free
to send again.
"""

from typing import Annotated

import msgspec

from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage
from pheby.errors import BadRequest, ProtocolTooLarge

CHAT_TEXT_MAX = 64_000


class ChatSend(ClientMessage, frozen=True, tag="chat.send"):
    conversation_id: str
    text: str
    attachment_ids: Annotated[list[str], msgspec.Meta(max_length=10)] = msgspec.field(default_factory=list)


async def handle(ctx: WsContext, msg: ChatSend) -> None:
    if not msg.text.strip():
        raise BadRequest("text must not be blank")
    if len(msg.text) > CHAT_TEXT_MAX:
        raise ProtocolTooLarge(f"text is limited to {CHAT_TEXT_MAX} characters")
    await ctx.services.runs.send(
        ctx.account,
        msg.conversation_id,
        msg.text,
        msg.attachment_ids,
        rid(msg.request_id),
        judged_at=ctx.connection.judged_at,
    )

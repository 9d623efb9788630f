"""`chat.send` → `run.accepted`, `message.start`, then the run's events (see `pheby.runs`)."""

from typing import Annotated

import msgspec

from handlers.ws.context import WsContext, rid
from handlers.ws.messages import ClientMessage
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
    if len(set(msg.attachment_ids)) != len(msg.attachment_ids):
        raise BadRequest("attachment_ids must be distinct")
    if msg.attachment_ids:
        raise BadRequest("Unknown attachment ids")  # uploads arrive with the attachments feature
    services = ctx.services
    conversation = await services.conversations.get(ctx.account.id, msg.conversation_id)
    run = services.runs.reserve(ctx.account, conversation)
    await services.runs.start(run, conversation, msg.text, rid(msg.request_id))

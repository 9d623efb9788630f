"""`chat.send` → `run.accepted`, `message.start`, then the run's events (see `pheby.runs`).

Attachments are checked before the run starts and claimed only once it is accepted, so a
`run_active` (or any failure to start) leaves them free to send again.
"""

from typing import Annotated

import msgspec

from handlers.ws.context import WsContext, rid
from handlers.ws.messages import ClientMessage
from pheby.attachments import pheby_descriptor
from pheby.errors import BadRequest, ProtocolTooLarge
from pheby.events import AttachmentAdded

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
    services = ctx.services
    conversation = await services.conversations.get(ctx.account.id, msg.conversation_id)
    run = services.runs.reserve(ctx.account, conversation)
    try:
        prepared = await services.attachments.prepare_chat_input(
            ctx.account.id, conversation.id, msg.text, msg.attachment_ids
        )
        if prepared.attachments:
            await services.conversations.remember_input(conversation.id, prepared.text, msg.text)
    except BaseException:
        services.runs.release(run)
        raise
    await services.runs.start(run, conversation, prepared.text, rid(msg.request_id))
    if prepared.attachments:
        claimed = await services.attachments.claim(prepared.attachments, run.user_message_id)
        for attachment in claimed:
            ctx.broadcast(AttachmentAdded(conversation_id=conversation.id, attachment=pheby_descriptor(attachment)))

"""`conversation.create` → `conversation.created`, plus a `conversation.updated` broadcast."""

from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage
from pheby.protocol.frames import ConversationCreated, ConversationUpdated


class ConversationCreate(ClientMessage, frozen=True, tag="conversation.create"):
    name: str | None = None


async def handle(ctx: WsContext, msg: ConversationCreate) -> None:
    conversation = await ctx.services.conversations.create(ctx.account.id, msg.name)
    ctx.reply(
        ConversationCreated(conversation_id=conversation.id, name=conversation.name, request_id=rid(msg.request_id))
    )
    ctx.broadcast(ConversationUpdated(conversation_id=conversation.id, name=conversation.name))

"""`conversation.rename` → `conversation.renamed` reply, plus the same event broadcast."""

from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage
from pheby.protocol.frames import ConversationRenamed


class ConversationRename(ClientMessage, frozen=True, tag="conversation.rename"):
    conversation_id: str
    name: str


async def handle(ctx: WsContext, msg: ConversationRename) -> None:
    conversation = await ctx.services.conversations.rename(ctx.account.id, msg.conversation_id, msg.name)
    ctx.reply(
        ConversationRenamed(conversation_id=conversation.id, name=conversation.name, request_id=rid(msg.request_id))
    )
    ctx.broadcast(ConversationRenamed(conversation_id=conversation.id, name=conversation.name))

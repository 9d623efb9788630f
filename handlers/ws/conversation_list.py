"""`conversation.list` → `conversation.snapshot`."""

from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage
from pheby.protocol.frames import ConversationSnapshot, ConversationSummary, iso_utc


class ConversationList(ClientMessage, frozen=True, tag="conversation.list"):
    pass


async def handle(ctx: WsContext, msg: ConversationList) -> None:
    conversations = await ctx.services.conversations.list(ctx.account.id)
    ctx.reply(
        ConversationSnapshot(
            request_id=rid(msg.request_id),
            conversations=[
                ConversationSummary(
                    conversation_id=c.id,
                    name=c.name,
                    session_id=c.session_id,
                    last_active=iso_utc(c.last_active),
                    source=c.source,
                )
                for c in conversations
            ],
        )
    )

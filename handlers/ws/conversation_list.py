"""`conversation.list` → `conversation.snapshot`."""

from datetime import UTC, datetime

from handlers.ws.context import WsContext, rid
from handlers.ws.messages import ClientMessage
from pheby.events import ConversationSnapshot, ConversationSummary


class ConversationList(ClientMessage, frozen=True, tag="conversation.list"):
    pass


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, UTC).isoformat() if ts is not None else None


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
                    last_active=_iso(c.last_active),
                    source=c.source,
                )
                for c in conversations
            ],
        )
    )

"""`yolo.current` → `yolo.snapshot` (auto-approve is always conversation-scoped)."""

from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage
from pheby.protocol.frames import YoloSnapshot


class YoloCurrent(ClientMessage, frozen=True, tag="yolo.current"):
    conversation_id: str


async def handle(ctx: WsContext, msg: YoloCurrent) -> None:
    conversation = await ctx.services.conversations.get(ctx.account.id, msg.conversation_id)
    ctx.reply(YoloSnapshot(enabled=conversation.yolo, conversation_id=conversation.id, request_id=rid(msg.request_id)))

"""`yolo.set` → `yolo.changed` reply and broadcast; the flag is kept in SQLite across restarts."""

from handlers.ws.context import WsContext, rid
from handlers.ws.messages import ClientMessage
from pheby.events import YoloChanged


class YoloSet(ClientMessage, frozen=True, tag="yolo.set"):
    conversation_id: str
    enabled: bool  # msgspec refuses anything but a JSON boolean


async def handle(ctx: WsContext, msg: YoloSet) -> None:
    conversation = await ctx.services.conversations.set_yolo(ctx.account.id, msg.conversation_id, msg.enabled)
    ctx.reply(YoloChanged(enabled=conversation.yolo, conversation_id=conversation.id, request_id=rid(msg.request_id)))
    ctx.broadcast(YoloChanged(enabled=conversation.yolo, conversation_id=conversation.id))

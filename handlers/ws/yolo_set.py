"""`yolo.set` → `yolo.changed` reply and broadcast.

The flag is kept in SQLite across restarts; with the companion plugin live it also turns on
Hermes's own session YOLO for the conversation's runs (Hermes's hard limits still apply).
"""

from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage
from pheby.protocol.frames import YoloChanged


class YoloSet(ClientMessage, frozen=True, tag="yolo.set"):
    conversation_id: str
    enabled: bool  # msgspec refuses anything but a JSON boolean


async def handle(ctx: WsContext, msg: YoloSet) -> None:
    conversation = await ctx.services.conversation_settings.set_yolo(ctx.account, msg.conversation_id, msg.enabled)
    ctx.reply(YoloChanged(enabled=conversation.yolo, conversation_id=conversation.id, request_id=rid(msg.request_id)))
    ctx.broadcast(YoloChanged(enabled=conversation.yolo, conversation_id=conversation.id))

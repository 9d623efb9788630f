"""`ping` → `pong` (client-side liveness; protocol pings come from uvicorn)."""

from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage
from pheby.protocol.frames import Pong


class Ping(ClientMessage, frozen=True, tag="ping"):
    pass


async def handle(ctx: WsContext, msg: Ping) -> None:
    ctx.reply(Pong(request_id=rid(msg.request_id)))

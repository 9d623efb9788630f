"""`hello` — only valid as the first frame; `handshake.py` authenticates it."""

from handlers.ws.context import WsContext
from handlers.ws.messages import ClientMessage
from pheby.errors import BadRequest


class Hello(ClientMessage, frozen=True, tag="hello"):
    secret: str
    protocol_version: int


async def handle(ctx: WsContext, msg: Hello) -> None:
    del ctx, msg
    raise BadRequest("Already authenticated")

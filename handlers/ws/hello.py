"""`hello` — only valid as the first frame; `handshake.py` authenticates it.

Unknown fields are refused, as in every client message (the spec allows none): protocol changes
come with a new `protocol_version`, which the handshake checks first, so a later client is told
`version_mismatch` rather than `unauthorized`.
"""

import msgspec

from handlers.ws.support.context import WsContext
from handlers.ws.support.messages import ClientMessage
from pheby.errors import BadRequest


class Hello(ClientMessage, frozen=True, tag="hello"):
    secret: str
    protocol_version: int


HELLO_DECODER = msgspec.json.Decoder(Hello)


async def handle(ctx: WsContext, msg: Hello) -> None:
    del ctx, msg
    raise BadRequest("Already authenticated")

"""`hello` — only valid as the first frame; `handshake.py` authenticates it.

Unknown fields are refused, as in every client message (the spec allows none): protocol changes
come with a new `protocol_version`, which the handshake checks first, so a later client is told
`version_mismatch` rather than `unauthorized`. Extensions within version 1 are asked for by name in
`features` (unknown names are not granted, not refused), and `ready` lists those granted.
"""

from typing import Annotated

import msgspec
from msgspec import UNSET, UnsetType

from handlers.ws.support.context import WsContext
from handlers.ws.support.messages import ClientMessage
from pheby.errors import BadRequest

MAX_FEATURES = 16
MAX_FEATURE_CHARS = 64
Feature = Annotated[str, msgspec.Meta(max_length=MAX_FEATURE_CHARS)]


class Hello(ClientMessage, frozen=True, tag="hello"):
    secret: str
    protocol_version: int
    # Extensions the client asks for (docs/protocol-extensions.md); `ready` says which were granted.
    features: Annotated[list[Feature], msgspec.Meta(max_length=MAX_FEATURES)] | UnsetType = UNSET


HELLO_DECODER = msgspec.json.Decoder(Hello)


async def handle(ctx: WsContext, msg: Hello) -> None:
    del ctx, msg
    raise BadRequest("Already authenticated")

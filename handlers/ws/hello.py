"""`hello` — only valid as the first frame; `handshake.py` authenticates it (its secret, or the cookie).

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


MAX_SECRET_CHARS = 4096


class Hello(ClientMessage, frozen=True, tag="hello"):
    protocol_version: int
    # The owner secret or an account's token (the Pheby app); absent, the session cookie the
    # handshake carried authenticates the hello (Pheby Web, which holds no secret).
    secret: Annotated[str, msgspec.Meta(max_length=MAX_SECRET_CHARS)] | UnsetType = UNSET
    # Extensions the client asks for (docs/protocol-extensions.md); `ready` says which were granted.
    features: Annotated[list[Feature], msgspec.Meta(max_length=MAX_FEATURES)] | UnsetType = UNSET


HELLO_DECODER = msgspec.json.Decoder(Hello)


async def handle(ctx: WsContext, msg: Hello) -> None:
    del ctx, msg
    raise BadRequest("Already authenticated")

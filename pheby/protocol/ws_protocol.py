"""uvicorn's WebSocket protocol with a smaller frame ceiling until the client has said `hello`.

uvicorn's `ws_max_size` (4 MiB here) is one ceiling for every connection, so before this a socket
that had not authenticated could make the server buffer a 4 MiB message. With the installed
versions `ws="auto"` picks `WebSocketsSansIOProtocol` (websockets is installed), which parses
frames with a websockets `ServerProtocol`; that parser reads its `max_message_size` for each new
frame and refuses a frame whose header announces more, before reading its payload (it fails the
connection with 1009, "message too big"). So `PhebyWebSocketProtocol`:

- starts every connection at `PRE_HELLO_MAX_BYTES` (64 KiB);
- offers the app `scope["extensions"][FRAME_LIMIT_EXTENSION]["lift"]`, a callable that restores the
  configured ceiling; the handshake calls it once `hello` succeeded (`handlers.ws.support.frames`);
- writes the protocol's `too_large` error frame just before the 1009 close when a frame before
  `hello` was refused, so the client is told why; the app sees the 1009 disconnect and counts a
  failed hello.
"""

from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import PayloadTooBig
from websockets.frames import Frame, Opcode

from pheby.protocol.frames import Error, encode_event, error_event

# Frames before hello are at most this big; the handshake checks it too (for servers not run by `pheby serve`).
PRE_HELLO_MAX_BYTES = 64 * 1024
# The ASGI scope extension through which the app raises the protocol's frame ceiling after hello.
FRAME_LIMIT_EXTENSION = "pheby.websocket.frame_limit"


def pre_hello_too_large() -> Error:
    """The error for a frame over `PRE_HELLO_MAX_BYTES` before hello (sent by the protocol or the handshake)."""
    return error_event("too_large", f"Before hello, frames are limited to {PRE_HELLO_MAX_BYTES} bytes")


class PhebyWebSocketProtocol(WebSocketsSansIOProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._said_hello = False
        self.conn.max_message_size = PRE_HELLO_MAX_BYTES

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)  # set only when the upgrade was accepted
        if scope is not None:
            scope["extensions"][FRAME_LIMIT_EXTENSION] = {"lift": self.lift_frame_limit}

    def lift_frame_limit(self) -> None:
        """Frames up to uvicorn's `ws_max_size` from now on (the client said hello)."""
        self._said_hello = True
        self.conn.max_message_size = self.config.ws_max_size

    def handle_parser_exception(self) -> None:
        if not self._said_hello and isinstance(self.conn.parser_exc, PayloadTooBig) and not self.transport.is_closing():
            error = Frame(Opcode.TEXT, encode_event(pre_hello_too_large())).serialize(mask=False, extensions=[])
            self.transport.write(error)  # before the close frame that super() writes
        super().handle_parser_exception()

"""uvicorn's WebSocket protocol with a smaller frame ceiling, and one byte budget for all sockets,
until the client has said `hello`.

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
  failed hello;
- counts what every socket sends until its `hello` against one budget for the server
  (`PreHelloBytes`, `with_pre_hello_budget`, `PHEBY_WS_PRE_HELLO_BYTES`). A socket may buffer a
  64 KiB frame and an address may hold 8 such sockets, but addresses are many (an IPv6 prefix holds
  plenty), so without it the server could be made to hold 64 KiB for each socket up to its socket
  cap. The socket whose bytes would pass the budget gets a `rate_limited` error and a 1013 close
  (try again later; not a failed hello); its bytes, and each socket's once it said hello or went,
  are given back.
"""

import logging
from typing import Any, Self

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import PayloadTooBig
from websockets.frames import Frame, Opcode

from pheby.protocol.frames import Error, encode_event, error_event
from pheby.protocol.hub import CLOSE_TRY_AGAIN_LATER

log = logging.getLogger("pheby.ws")

# Frames before hello are at most this big; the handshake checks it too (for servers not run by `pheby serve`).
PRE_HELLO_MAX_BYTES = 64 * 1024
# The ASGI scope extension through which the app raises the protocol's frame ceiling after hello.
FRAME_LIMIT_EXTENSION = "pheby.websocket.frame_limit"


def pre_hello_too_large() -> Error:
    """The error for a frame over `PRE_HELLO_MAX_BYTES` before hello (sent by the protocol or the handshake)."""
    return error_event("too_large", f"Before hello, frames are limited to {PRE_HELLO_MAX_BYTES} bytes")


class PreHelloBytes:
    """The bytes the server's sockets have sent before their `hello`, together, against `limit`."""

    __slots__ = ("held", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self, size: int) -> bool:
        """Count `size` more bytes in; False (and nothing counted) when they would pass the limit."""
        if self.held + size > self.limit:
            return False
        self.held += size
        return True

    def give_back(self, size: int) -> None:
        self.held -= size


class PhebyWebSocketProtocol(WebSocketsSansIOProtocol):
    # The server's budget for bytes before hello (see `with_pre_hello_budget`); None: only the frame limit.
    pre_hello: PreHelloBytes | None = None

    @classmethod
    def with_pre_hello_budget(cls, limit: int) -> type[Self]:
        """This protocol with a budget of `limit` bytes before hello, for one server: uvicorn makes each
        connection's protocol from the class it is given, so the budget is an attribute of a class of its own."""
        return type(cls.__name__, (cls,), {"pre_hello": PreHelloBytes(limit), "__doc__": cls.__doc__})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._said_hello = False
        self._pre_hello_held = 0  # of `pre_hello`, by this socket
        self._over_budget = False
        self.conn.max_message_size = PRE_HELLO_MAX_BYTES

    def data_received(self, data: bytes) -> None:
        if self._over_budget:
            return  # refused: the close is under way
        budget = self.pre_hello
        if not self._said_hello and budget is not None:
            if not budget.take(len(data)):
                log.warning("refusing a WebSocket before hello: those sockets hold %d bytes", budget.held)
                self._refuse_over_budget()
                return
            self._pre_hello_held += len(data)
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._give_back_pre_hello()
        super().connection_lost(exc)
        scope = getattr(self, "scope", None)
        if scope is not None:  # its `lift`, a method of this protocol in the protocol's own scope: a cycle
            scope["extensions"].pop(FRAME_LIMIT_EXTENSION, None)

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)  # set only when the upgrade was accepted
        if scope is not None:
            scope["extensions"][FRAME_LIMIT_EXTENSION] = {"lift": self.lift_frame_limit}

    def lift_frame_limit(self) -> None:
        """Frames up to uvicorn's `ws_max_size` from now on (the client said hello)."""
        self._said_hello = True
        self._give_back_pre_hello()
        self.conn.max_message_size = self.config.ws_max_size

    def _give_back_pre_hello(self) -> None:
        if self.pre_hello is not None and self._pre_hello_held:
            self.pre_hello.give_back(self._pre_hello_held)
            self._pre_hello_held = 0

    def _refuse_over_budget(self) -> None:
        """`rate_limited` and 1013, as for a server holding its socket cap; before the upgrade is
        answered there is no WebSocket to close, so the connection is dropped."""
        self._over_budget = True
        if not self.handshake_complete:
            self.transport.close()
            return
        busy = error_event(
            "rate_limited", "The server holds too much from sockets that have not said hello; try again later"
        )
        error = Frame(Opcode.TEXT, encode_event(busy)).serialize(mask=False, extensions=[])
        self.conn.fail(CLOSE_TRY_AGAIN_LATER, "try again later")
        self.queue.put_nowait({"type": "websocket.disconnect", "code": CLOSE_TRY_AGAIN_LATER})
        self.transport.write(error + b"".join(self.conn.data_to_send()))
        self.close_sent = True
        self.transport.close()

    def handle_parser_exception(self) -> None:
        if not self._said_hello and isinstance(self.conn.parser_exc, PayloadTooBig) and not self.transport.is_closing():
            error = Frame(Opcode.TEXT, encode_event(pre_hello_too_large())).serialize(mask=False, extensions=[])
            self.transport.write(error)  # before the close frame that super() writes
        super().handle_parser_exception()

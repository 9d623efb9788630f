"""Inbound frames: receiving one, its size limits, and decoding it into a `ClientMessage`.

A frame that can't become a message raises `FrameError`, which carries the protocol error to
send (echoing the frame's `request_id` when one can be read from it). Every decode goes through
`pheby.protocol.json_input.decode_json`, so JSON nested too deep is malformed input, not a RecursionError.

Before `hello` a frame is at most `PRE_HELLO_MAX_BYTES` (`pheby.protocol.ws_protocol`); under
`pheby serve` that WebSocket protocol itself enforces it, refusing a bigger frame from its header, and
`lift_frame_limit` raises its ceiling once the hello succeeded.
"""

from typing import Any, NamedTuple

import msgspec
from litestar import WebSocket
from litestar.connection.base import empty_receive, empty_send
from msgspec import UNSET, UnsetType

from handlers.ws.support.messages import ClientMessage, RequestIdOnly
from handlers.ws.support.registry import DECODER, KNOWN_TYPES
from pheby.protocol.frames import Error, error_event
from pheby.protocol.json_input import NestedTooDeeply, decode_json
from pheby.protocol.ws_protocol import FRAME_LIMIT_EXTENSION

MAX_FRAME_BYTES = 2 * 1024 * 1024
CLOSE_MESSAGE_TOO_BIG = 1009


class FrameError(Exception):
    """A frame that could not become a message; carries the protocol error to send."""

    def __init__(self, code: str, message: str, request_id: str | UnsetType = UNSET) -> None:
        super().__init__(message)
        self.event: Error = error_event(code, message, request_id)


class Gone(NamedTuple):
    """The peer left (or the protocol closed the socket) with this close code."""

    code: int


async def receive_frame(socket: WebSocket[Any, Any, Any]) -> bytes | str | None:
    """The next text or binary frame, or None once the peer has gone."""
    received = await receive_frame_or_close(socket)
    return None if isinstance(received, Gone) else received


async def receive_frame_or_close(socket: WebSocket[Any, Any, Any]) -> bytes | str | Gone:
    """The next text or binary frame, or the close code once the peer has gone."""
    message = await socket.receive()
    if message["type"] != "websocket.receive":
        code = message.get("code")
        return Gone(code if isinstance(code, int) else 1005)
    text = message.get("text")
    return text if text is not None else (message.get("bytes") or b"")


def lift_frame_limit(socket: WebSocket[Any, Any, Any]) -> None:
    """After a successful hello: let the protocol accept frames up to its normal ceiling again."""
    extension = (socket.scope.get("extensions") or {}).get(FRAME_LIMIT_EXTENSION)
    lift = extension.get("lift") if extension is not None else None
    if callable(lift):
        lift()


def let_go(socket: WebSocket[Any, Any, Any]) -> None:
    """Once the handler is done with `socket`: Litestar's `WebSocket` holds itself in a reference cycle (its
    receive and send wrappers are closures over it), and with it the protocol (uvicorn's parser, the
    connection's compressor: ~110 KiB while it streamed). Given Litestar's placeholders in their place, all of it
    is freed at once, not left to the garbage collector's next full pass."""
    socket.receive = empty_receive
    socket.send = empty_send


def decode(raw: bytes | str) -> ClientMessage:
    if frame_size(raw) > MAX_FRAME_BYTES:
        raise FrameError("too_large", f"Frames are limited to {MAX_FRAME_BYTES} bytes", peek_request_id(raw))
    try:
        message: ClientMessage = decode_json(DECODER, raw)
    except msgspec.ValidationError as exc:  # a subclass of DecodeError, so it goes first
        raise _validation_error(raw, str(exc)) from None
    except NestedTooDeeply:
        raise FrameError("invalid_json", "The frame is nested too deeply") from None
    except msgspec.DecodeError:
        raise FrameError("invalid_json", "The frame is not valid JSON") from None
    return message


def frame_size(raw: bytes | str, limit: int = MAX_FRAME_BYTES) -> int:
    """The frame's size in bytes, or a lower bound of it when that alone shows it is within `limit`."""
    if isinstance(raw, bytes) or len(raw) * 4 <= limit:  # UTF-8 is at most 4 bytes a character
        return len(raw)
    return len(raw.encode())


def _validation_error(raw: bytes | str, detail: str) -> FrameError:
    request_id = peek_request_id(raw)
    if detail.endswith("at `$.type`") or "missing required field `type`" in detail:
        type_name = peek_type(raw)
        if type_name is not None and type_name not in KNOWN_TYPES:
            return FrameError("unknown_type", f"Unknown message type {type_name[:64]!r}", request_id)
    return FrameError("bad_request", detail, request_id)


class _TypeOnly(msgspec.Struct, frozen=True):
    type: Any = None


_TYPE_ONLY = msgspec.json.Decoder(_TypeOnly)
_REQUEST_ID_ONLY = msgspec.json.Decoder(RequestIdOnly)


def peek_type(raw: bytes | str) -> str | None:
    try:
        value = decode_json(_TYPE_ONLY, raw).type
    except msgspec.MsgspecError:
        return None
    return value if isinstance(value, str) else None


def peek_request_id(raw: bytes | str) -> str | UnsetType:
    """The frame's request_id, if it has a valid one (one too long is not echoed)."""
    try:
        request_id = decode_json(_REQUEST_ID_ONLY, raw).request_id
    except msgspec.MsgspecError:
        return UNSET
    return UNSET if request_id is None else request_id

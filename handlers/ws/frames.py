"""Inbound frames: receiving one, its size limit, and decoding it into a `ClientMessage`.

A frame that can't become a message raises `FrameError`, which carries the protocol error to
send (echoing the frame's `request_id` when one can be read from it).
"""

from typing import Any

import msgspec
from litestar import WebSocket
from msgspec import UNSET, UnsetType

from handlers.ws.messages import ClientMessage, RequestIdOnly
from handlers.ws.registry import DECODER, KNOWN_TYPES
from pheby.events import Error, error_event

MAX_FRAME_BYTES = 2 * 1024 * 1024


class FrameError(Exception):
    """A frame that could not become a message; carries the protocol error to send."""

    def __init__(self, code: str, message: str, request_id: str | UnsetType = UNSET) -> None:
        super().__init__(message)
        self.event: Error = error_event(code, message, request_id)


async def receive_frame(socket: WebSocket[Any, Any, Any]) -> bytes | str | None:
    """The next text or binary frame, or None once the peer has gone."""
    message = await socket.receive()
    if message["type"] != "websocket.receive":
        return None
    text = message.get("text")
    return text if text is not None else (message.get("bytes") or b"")


def decode(raw: bytes | str) -> ClientMessage:
    if frame_size(raw) > MAX_FRAME_BYTES:
        raise FrameError("too_large", f"Frames are limited to {MAX_FRAME_BYTES} bytes", peek_request_id(raw))
    try:
        message: ClientMessage = DECODER.decode(raw)
    except msgspec.ValidationError as exc:  # a subclass of DecodeError, so it goes first
        raise _validation_error(raw, str(exc)) from None
    except msgspec.DecodeError:
        raise FrameError("invalid_json", "The frame is not valid JSON") from None
    return message


def frame_size(raw: bytes | str) -> int:
    if isinstance(raw, bytes) or len(raw) * 4 <= MAX_FRAME_BYTES:  # UTF-8 is at most 4 bytes a character
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


def peek_type(raw: bytes | str) -> str | None:
    try:
        value = msgspec.json.decode(raw, type=_TypeOnly).type
    except msgspec.MsgspecError:
        return None
    return value if isinstance(value, str) else None


def peek_request_id(raw: bytes | str) -> str | UnsetType:
    try:
        request_id = msgspec.json.decode(raw, type=RequestIdOnly).request_id
    except msgspec.MsgspecError:
        return UNSET
    return UNSET if request_id is None else request_id

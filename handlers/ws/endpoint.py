"""`/ws` — the Pheby WebSocket: hello and lockout, then one decoded message at a time.

A bad frame is answered with an `error` and never closes an authenticated connection; only a
failed hello closes it. Every reply and error echoes the message's `request_id`.
"""

import asyncio
import logging
from typing import Any

import msgspec
from litestar import WebSocket, websocket
from litestar.di import NamedDependency
from msgspec import UNSET, UnsetType

from handlers.ws.context import WsContext
from handlers.ws.hello import Hello
from handlers.ws.messages import ClientMessage, RequestIdOnly
from handlers.ws.registry import DECODER, KNOWN_TYPES, dispatch
from pheby.accounts import Account
from pheby.errors import PhebyError
from pheby.events import PROTOCOL_VERSION, Event, Ready, encode_event, error_event
from pheby.hub import Connection
from pheby.services import Services

log = logging.getLogger("pheby.ws")

MAX_FRAME_BYTES = 2 * 1024 * 1024
CLOSE_POLICY_VIOLATION = 1008
# The codes the protocol defines; anything else is reported as internal_error.
PROTOCOL_CODES = frozenset(
    {
        "unauthorized", "auth_timeout", "version_mismatch", "bad_request", "invalid_json", "unknown_type",
        "not_found", "conversation_not_found", "approval_not_found", "clarify_not_found", "too_large",
        "rate_limited", "run_active", "internal_error", "not_implemented",
    }
)  # fmt: skip


class FrameError(Exception):
    """A frame that could not become a message; carries the protocol error to send."""

    def __init__(self, code: str, message: str, request_id: str | UnsetType = UNSET) -> None:
        super().__init__(message)
        self.event = error_event(code, message, request_id)


@websocket("/ws")
async def pheby_socket(socket: WebSocket[Any, Any, Any], services: NamedDependency[Services]) -> None:
    await socket.accept()
    address = services.authenticator.client_address(socket)
    hello = await _handshake(socket, services, address)
    if hello is None:
        return
    account, hello_request_id = hello
    connection = Connection(account.id, socket.send_text, socket.close)
    ctx = WsContext(account, services, connection)
    services.hub.add(connection)
    connection.start()
    try:
        connection.send(Ready(request_id=hello_request_id))
        await _serve(socket, ctx)
    finally:
        services.hub.remove(connection)
        await connection.drain_and_stop()


async def _handshake(
    socket: WebSocket[Any, Any, Any], services: Services, address: str
) -> tuple[Account, str | UnsetType] | None:
    """The account and request_id of a valid first-frame hello, else None after an error and a close."""
    if await services.hello_limiter.is_locked(address):
        await _refuse(socket, error_event("rate_limited", "Too many failed attempts; try again later"))
        return None
    try:
        raw = await asyncio.wait_for(_receive_frame(socket), timeout=services.settings.ws_hello_timeout)
    except TimeoutError:
        await _refuse(socket, error_event("auth_timeout", "No hello within the time allowed"))
        return None
    if raw is None:
        return None
    try:
        message = _decode(raw)
    except FrameError as exc:
        await _refuse(socket, exc.event)
        return None
    if not isinstance(message, Hello):
        await _refuse(socket, error_event("unauthorized", "The first message must be hello", _rid(message)))
        return None
    if message.protocol_version != PROTOCOL_VERSION:
        await _refuse(
            socket,
            error_event("version_mismatch", f"This server speaks protocol version {PROTOCOL_VERSION}", _rid(message)),
        )
        return None
    principal = await services.authenticator.from_secret(message.secret)
    if principal is None:
        await services.hello_limiter.record_failure(address)
        await _refuse(socket, error_event("unauthorized", "Invalid secret", _rid(message)))
        return None
    return principal.account, _rid(message)


async def _refuse(socket: WebSocket[Any, Any, Any], event: Event) -> None:
    try:
        await socket.send_text(encode_event(event).decode())
        await socket.close(CLOSE_POLICY_VIOLATION, event_code(event))
    except Exception:  # noqa: BLE001 - the peer is already gone
        log.debug("peer left during a refused handshake")


def event_code(event: Event) -> str:
    error = getattr(event, "error", None)
    return str(getattr(error, "code", ""))


async def _serve(socket: WebSocket[Any, Any, Any], ctx: WsContext) -> None:
    while not ctx.connection.closed.is_set():
        raw = await _receive_frame(socket)
        if raw is None:
            return
        try:
            message = _decode(raw)
        except FrameError as exc:
            ctx.reply(exc.event)
            continue
        try:
            await dispatch(ctx, message)
        except PhebyError as exc:
            code = exc.code if exc.code in PROTOCOL_CODES else "internal_error"
            ctx.reply(error_event(code, exc.message, _rid(message)))
        except Exception:
            log.exception("message handler failed")
            ctx.reply(error_event("internal_error", "Internal error", _rid(message)))


async def _receive_frame(socket: WebSocket[Any, Any, Any]) -> bytes | str | None:
    """The next text or binary frame, or None once the peer has gone."""
    message = await socket.receive()
    if message["type"] != "websocket.receive":
        return None
    text = message.get("text")
    return text if text is not None else (message.get("bytes") or b"")


def _decode(raw: bytes | str) -> ClientMessage:
    if _frame_size(raw) > MAX_FRAME_BYTES:
        raise FrameError("too_large", f"Frames are limited to {MAX_FRAME_BYTES} bytes", _peek_request_id(raw))
    try:
        message: ClientMessage = DECODER.decode(raw)
    except msgspec.ValidationError as exc:  # a subclass of DecodeError, so it goes first
        raise _validation_error(raw, str(exc)) from None
    except msgspec.DecodeError:
        raise FrameError("invalid_json", "The frame is not valid JSON") from None
    return message


def _frame_size(raw: bytes | str) -> int:
    if isinstance(raw, bytes) or len(raw) * 4 <= MAX_FRAME_BYTES:  # UTF-8 is at most 4 bytes a character
        return len(raw)
    return len(raw.encode())


def _validation_error(raw: bytes | str, detail: str) -> FrameError:
    request_id = _peek_request_id(raw)
    if detail.endswith("at `$.type`") or "missing required field `type`" in detail:
        type_name = _peek_type(raw)
        if type_name is not None and type_name not in KNOWN_TYPES:
            return FrameError("unknown_type", f"Unknown message type {type_name[:64]!r}", request_id)
    return FrameError("bad_request", detail, request_id)


class _TypeOnly(msgspec.Struct, frozen=True):
    type: Any = None


def _peek_type(raw: bytes | str) -> str | None:
    try:
        value = msgspec.json.decode(raw, type=_TypeOnly).type
    except msgspec.MsgspecError:
        return None
    return value if isinstance(value, str) else None


def _peek_request_id(raw: bytes | str) -> str | UnsetType:
    try:
        request_id = msgspec.json.decode(raw, type=RequestIdOnly).request_id
    except msgspec.MsgspecError:
        return UNSET
    return UNSET if request_id is None else request_id


def _rid(message: ClientMessage) -> str | UnsetType:
    if message.request_id is None:
        return UNSET
    return message.request_id

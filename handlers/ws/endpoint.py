"""`/ws` — the Pheby WebSocket: the handshake (see `handshake.py`), then one decoded message at a time.

A bad frame is answered with an `error` and never closes an authenticated connection; only a
failed hello closes it. Every reply and error echoes the message's `request_id`.
"""

import logging
from typing import Any

from litestar import WebSocket, websocket
from litestar.di import NamedDependency

from handlers.ws.context import WsContext, rid
from handlers.ws.frames import FrameError, decode, receive_frame
from handlers.ws.handshake import handshake
from handlers.ws.registry import dispatch
from pheby.errors import PhebyError
from pheby.events import Ready, error_event
from pheby.hub import Connection
from pheby.services import Services

log = logging.getLogger("pheby.ws")

# The codes the protocol defines; anything else is reported as internal_error.
PROTOCOL_CODES = frozenset(
    {
        "unauthorized", "auth_timeout", "version_mismatch", "bad_request", "invalid_json", "unknown_type",
        "not_found", "conversation_not_found", "approval_not_found", "clarify_not_found", "too_large",
        "rate_limited", "run_active", "internal_error", "not_implemented",
    }
)  # fmt: skip


@websocket("/ws")
async def pheby_socket(socket: WebSocket[Any, Any, Any], services: NamedDependency[Services]) -> None:
    await socket.accept()
    address = services.authenticator.client_address(socket)
    hello = await handshake(socket, services, address)
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


async def _serve(socket: WebSocket[Any, Any, Any], ctx: WsContext) -> None:
    while not ctx.connection.closed.is_set():
        raw = await receive_frame(socket)
        if raw is None:
            return
        try:
            message = decode(raw)
        except FrameError as exc:
            ctx.reply(exc.event)
            continue
        try:
            await dispatch(ctx, message)
        except PhebyError as exc:
            code = exc.code if exc.code in PROTOCOL_CODES else "internal_error"
            ctx.reply(error_event(code, exc.message, rid(message.request_id)))
        except Exception:
            log.exception("message handler failed")
            ctx.reply(error_event("internal_error", "Internal error", rid(message.request_id)))

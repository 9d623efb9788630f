"""`/ws` — the Pheby WebSocket: the handshake (see `handshake.py`), then one decoded message at a time.

A bad frame is answered with an `error` and never closes an authenticated connection; only a
failed hello closes it. Every reply and error echoes the message's `request_id`. Beyond the
server's socket cap (`PHEBY_WS_MAX_CONNECTIONS`, counted before hello) a socket is refused
with `rate_limited` and 1013; beyond an account's cap, its hello is answered `rate_limited`.
The connection remembers the credential of its hello, so its revocation closes it
(`pheby.revocation`); from then on its messages are ignored.

A handshake whose `Origin` is present and not allowed (the server's own origin, `PHEBY_ALLOWED_ORIGINS`)
is refused before it is accepted (HTTP 403), whatever credential would follow: a page of another site
can't open a socket that rides the person's cookie. Without `Origin` (a native app) it is served.
"""

import logging
from typing import Any

from litestar import WebSocket, websocket
from litestar.di import NamedDependency
from msgspec import UNSET

from handlers.ws.support.context import WsContext, error_for, rid
from handlers.ws.support.frames import FrameError, decode, let_go, receive_frame
from handlers.ws.support.handshake import CLOSE_POLICY_VIOLATION, event_code, handshake
from handlers.ws.support.registry import dispatch
from pheby import metrics
from pheby.errors import RateLimited
from pheby.protocol.append import DELTA_APPEND, DELTA_PACED, DELTA_PACKED, PACED_DELTA_SECONDS
from pheby.protocol.frames import Event, Ready, encode_event, error_event
from pheby.protocol.hub import CLOSE_TRY_AGAIN_LATER, Connection
from pheby.services import Services

log = logging.getLogger("pheby.ws")


@websocket("/ws")
async def pheby_socket(socket: WebSocket[Any, Any, Any], services: NamedDependency[Services]) -> None:
    try:
        await _accepted(socket, services)
    finally:
        let_go(socket)


async def _accepted(socket: WebSocket[Any, Any, Any], services: Services) -> None:
    hub = services.hub
    if socket.headers.get("origin") is not None and not services.authenticator.origin_allowed(socket):
        metrics.HELLOS_REFUSED.labels("forbidden_origin").inc()
        await socket.close(CLOSE_POLICY_VIOLATION)  # before accept: the server answers the handshake 403
        return
    await socket.accept()
    if not hub.claim_socket():
        full = error_event("rate_limited", "The server holds too many connections; try again later")
        await _refuse(socket, full, CLOSE_TRY_AGAIN_LATER)
        return
    try:
        await _authenticated(socket, services)
    finally:
        hub.release_socket()


async def _authenticated(socket: WebSocket[Any, Any, Any], services: Services) -> None:
    address = services.authenticator.client_address(socket)
    hello = await handshake(socket, services, address)
    if hello is None:
        return
    principal, hello_request_id, features = hello
    connection = Connection(
        principal.account.id,
        socket.send_text,
        socket.close,
        max_bytes=services.settings.ws_send_queue_bytes,
        token_id=principal.token_id,
        expires_at=principal.expires_at,
        judged_at=principal.judged_at,
        delta_append=features is not UNSET and DELTA_APPEND in features,
        delta_packed=features is not UNSET and DELTA_PACKED in features,
        delta_pace=PACED_DELTA_SECONDS if features is not UNSET and DELTA_PACED in features else 0.0,
    )
    try:
        services.hub.add(connection)
    except RateLimited as exc:
        await _refuse(socket, error_event(exc.code, exc.message, hello_request_id), CLOSE_POLICY_VIOLATION)
        return
    ctx = WsContext(principal.account, services, connection)
    connection.start()
    try:
        await services.hub.joined(principal.account.id)  # events broadcast after `ready` reach it, from any process
        connection.send(Ready(request_id=hello_request_id, features=features))
        await _serve(socket, ctx)
    finally:
        services.hub.remove(connection)
        await connection.drain_and_stop()


async def _serve(socket: WebSocket[Any, Any, Any], ctx: WsContext) -> None:
    while not ctx.connection.closed.is_set():
        raw = await receive_frame(socket)
        if raw is None:
            return
        if ctx.connection.revoked:
            continue  # the credential was revoked: its close is on its way
        try:
            message = decode(raw)
        except FrameError as exc:
            ctx.reply(exc.event)
            continue
        try:
            await dispatch(ctx, message)
        except Exception as exc:  # noqa: BLE001 - every failure is answered; error_for logs the unexpected
            ctx.reply(error_for(exc, rid(message.request_id)))


async def _refuse(socket: WebSocket[Any, Any, Any], event: Event, code: int) -> None:
    metrics.HELLOS_REFUSED.labels(event_code(event)).inc()
    try:
        await socket.send_text(encode_event(event).decode())
        await socket.close(code, "rate_limited")
    except Exception:  # noqa: BLE001 - the peer is already gone
        log.debug("peer left during a refused connection")

"""`/ws` — the Pheby WebSocket: the handshake (see `handshake.py`), then one decoded message at a time.

A bad frame is answered with an `error` and never closes an authenticated connection; only a
failed hello closes it. Every reply and error echoes the message's `request_id`.
"""

from typing import Any

from litestar import WebSocket, websocket
from litestar.di import NamedDependency

from handlers.ws.context import WsContext, error_for, rid
from handlers.ws.frames import FrameError, decode, receive_frame
from handlers.ws.handshake import handshake
from handlers.ws.registry import dispatch
from pheby.events import Ready
from pheby.hub import Connection
from pheby.services import Services


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
        except Exception as exc:  # noqa: BLE001 - every failure is answered; error_for logs the unexpected
            ctx.reply(error_for(exc, rid(message.request_id)))

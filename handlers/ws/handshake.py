"""The first frame of a socket: a `hello` with the right protocol version and a valid secret.

Anything else is answered with an `error` and the socket is closed (1008). A source address with
too many failed hellos is locked out (see `pheby.lockout`).
"""

import asyncio
import logging
from typing import Any

from litestar import WebSocket
from msgspec import UnsetType

from handlers.ws.context import rid
from handlers.ws.frames import FrameError, decode, receive_frame
from handlers.ws.hello import Hello
from pheby.accounts import Account
from pheby.events import PROTOCOL_VERSION, Event, encode_event, error_event
from pheby.services import Services

log = logging.getLogger("pheby.ws")

CLOSE_POLICY_VIOLATION = 1008


async def handshake(
    socket: WebSocket[Any, Any, Any], services: Services, address: str
) -> tuple[Account, str | UnsetType] | None:
    """The account and request_id of a valid first-frame hello, else None after an error and a close."""
    if await services.hello_limiter.is_locked(address):
        await _refuse(socket, error_event("rate_limited", "Too many failed attempts; try again later"))
        return None
    try:
        raw = await asyncio.wait_for(receive_frame(socket), timeout=services.settings.ws_hello_timeout)
    except TimeoutError:
        await _refuse(socket, error_event("auth_timeout", "No hello within the time allowed"))
        return None
    if raw is None:
        return None
    try:
        message = decode(raw)
    except FrameError as exc:
        await _refuse(socket, exc.event)
        return None
    if not isinstance(message, Hello):
        await _refuse(socket, error_event("unauthorized", "The first message must be hello", rid(message.request_id)))
        return None
    if message.protocol_version != PROTOCOL_VERSION:
        await _refuse(
            socket,
            error_event(
                "version_mismatch",
                f"This server speaks protocol version {PROTOCOL_VERSION}",
                rid(message.request_id),
            ),
        )
        return None
    principal = await services.authenticator.from_secret(message.secret)
    if principal is None:
        await services.hello_limiter.record_failure(address)
        await _refuse(socket, error_event("unauthorized", "Invalid secret", rid(message.request_id)))
        return None
    return principal.account, rid(message.request_id)


async def _refuse(socket: WebSocket[Any, Any, Any], event: Event) -> None:
    try:
        await socket.send_text(encode_event(event).decode())
        await socket.close(CLOSE_POLICY_VIOLATION, event_code(event))
    except Exception:  # noqa: BLE001 - the peer is already gone
        log.debug("peer left during a refused handshake")


def event_code(event: Event) -> str:
    error = getattr(event, "error", None)
    return str(getattr(error, "code", ""))

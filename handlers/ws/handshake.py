"""The first frame of a socket: a `hello` with the right protocol version and a valid secret.

Anything else is answered with an `error` and the socket is closed (1008). A source address with
too many failed hellos is locked out (see `pheby.lockout`).
"""

import asyncio
import logging
from typing import Any, NamedTuple

from litestar import WebSocket
from msgspec import UNSET, UnsetType

from handlers.ws.context import rid
from handlers.ws.frames import FrameError, decode, peek_request_id, receive_frame
from handlers.ws.hello import Hello
from pheby.accounts import Account
from pheby.events import PROTOCOL_VERSION, Error, Event, encode_event, error_event
from pheby.services import Services

log = logging.getLogger("pheby.ws")

CLOSE_POLICY_VIOLATION = 1008


async def handshake(
    socket: WebSocket[Any, Any, Any], services: Services, address: str
) -> tuple[Account, str | UnsetType] | None:
    """The account and request_id of a valid first-frame hello, else None after an error and a close.

    The lockout is checked when the socket opens and again when its hello is judged, one hello
    of an address at a time: sockets opened earlier get no extra guesses once the address is
    locked, not even with the right secret.
    """
    limiter = services.hello_limiter
    if await limiter.is_locked(address):
        await _refuse(socket, _locked_out(UNSET))
        return None
    try:
        raw = await asyncio.wait_for(receive_frame(socket), timeout=services.settings.ws_hello_timeout)
    except TimeoutError:
        await _refuse(socket, error_event("auth_timeout", "No hello within the time allowed"))
        return None
    if raw is None:
        return None
    async with limiter.one_at_a_time(address):
        if await limiter.is_locked(address):
            verdict: Welcome | Refusal = Refusal(_locked_out(peek_request_id(raw)), failed_hello=False)
        else:
            verdict = await _judge(raw, services)
            if isinstance(verdict, Refusal) and verdict.failed_hello:
                await limiter.record_failure(address)
    if isinstance(verdict, Refusal):
        await _refuse(socket, verdict.event)
        return None
    return verdict.account, verdict.request_id


class Welcome(NamedTuple):
    account: Account
    request_id: str | UnsetType


class Refusal(NamedTuple):
    event: Error
    failed_hello: bool  # counts toward the lockout


async def _judge(raw: bytes | str, services: Services) -> Welcome | Refusal:
    try:
        message = decode(raw)
    except FrameError as exc:
        return Refusal(exc.event, failed_hello=False)
    request_id = rid(message.request_id)
    if not isinstance(message, Hello):
        return Refusal(error_event("unauthorized", "The first message must be hello", request_id), failed_hello=False)
    if message.protocol_version != PROTOCOL_VERSION:
        return Refusal(
            error_event("version_mismatch", f"This server speaks protocol version {PROTOCOL_VERSION}", request_id),
            failed_hello=False,
        )
    principal = await services.authenticator.from_secret(message.secret)
    if principal is None:
        return Refusal(error_event("unauthorized", "Invalid secret", request_id), failed_hello=True)
    return Welcome(principal.account, request_id)


def _locked_out(request_id: str | UnsetType) -> Error:
    return error_event("rate_limited", "Too many failed attempts; try again later", request_id)


async def _refuse(socket: WebSocket[Any, Any, Any], event: Event) -> None:
    try:
        await socket.send_text(encode_event(event).decode())
        await socket.close(CLOSE_POLICY_VIOLATION, event_code(event))
    except Exception:  # noqa: BLE001 - the peer is already gone
        log.debug("peer left during a refused handshake")


def event_code(event: Event) -> str:
    error = getattr(event, "error", None)
    return str(getattr(error, "code", ""))

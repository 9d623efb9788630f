"""The first frame of a socket: a `hello` with the right protocol version and a valid secret.

Anything else is a failed hello: answered with `version_mismatch` or `unauthorized` (the spec's
handshake errors; never the codes of an open connection), counted toward the lockout, and the
socket is closed (1008). A source address with too many failed hellos is locked out (see
`pheby.lockout`); a socket that says nothing is closed with `auth_timeout`, uncounted.
"""

import asyncio
import logging
from typing import Any, NamedTuple

import msgspec
from litestar import WebSocket
from msgspec import UNSET, UnsetType

from handlers.ws.frames import MAX_FRAME_BYTES, frame_size, peek_request_id, peek_type, receive_frame
from handlers.ws.hello import HELLO_DECODER
from pheby.auth import Principal
from pheby.events import PROTOCOL_VERSION, Error, Event, encode_event, error_event
from pheby.services import Services

log = logging.getLogger("pheby.ws")

CLOSE_POLICY_VIOLATION = 1008


async def handshake(
    socket: WebSocket[Any, Any, Any], services: Services, address: str
) -> tuple[Principal, str | UnsetType] | None:
    """Who said a valid first-frame hello (account and credential) and its request_id; else None after
    an error and a close.

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
            verdict: Welcome | Error = _locked_out(peek_request_id(raw))
        else:
            verdict = await _judge(raw, services)
            if isinstance(verdict, Error):
                await limiter.record_failure(address)
    if isinstance(verdict, Error):
        await _refuse(socket, verdict)
        return None
    return verdict.principal, verdict.request_id


class Welcome(NamedTuple):
    principal: Principal
    request_id: str | UnsetType


class _VersionOnly(msgspec.Struct, frozen=True):
    protocol_version: Any = None


async def _judge(raw: bytes | str, services: Services) -> Welcome | Error:
    """A welcome, or the one of the spec's three handshake errors that fits (each a failed hello).

    A hello that doesn't speak our protocol version is `version_mismatch` whatever else is in it,
    so a client of a later version is told why; anything else wrong is `unauthorized`.
    """
    request_id = peek_request_id(raw)
    if frame_size(raw) > MAX_FRAME_BYTES or peek_type(raw) != "hello":
        return error_event("unauthorized", "The first message must be hello", request_id)
    version = msgspec.json.decode(raw, type=_VersionOnly).protocol_version  # the frame parsed as JSON above
    if type(version) is not int or version != PROTOCOL_VERSION:  # not 1.0, not true
        return error_event("version_mismatch", f"This server speaks protocol version {PROTOCOL_VERSION}", request_id)
    try:
        hello = HELLO_DECODER.decode(raw)
    except msgspec.MsgspecError as exc:
        return error_event("unauthorized", f"Malformed hello: {exc}", request_id)
    principal = await services.authenticator.from_secret(hello.secret)
    if principal is None:
        return error_event("unauthorized", "Invalid secret", request_id)
    return Welcome(principal, request_id)


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

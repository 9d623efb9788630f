"""The first frame of a socket: a `hello` with the right protocol version and a valid secret, or,
without a secret, the live session cookie the WebSocket handshake carried (Pheby Web). A browser's
handshake from a foreign Origin never gets this far: `endpoint.py` refuses it before accepting.

Anything else is a failed hello: answered with `version_mismatch`, `unauthorized`, `too_large`
(a frame over 64 KiB) or `bad_request` (a request_id over 128 characters), counted toward the
lockout, and the socket is closed (1008). A source address with too many failed hellos is locked
out (see `pheby.store.lockout`); a socket that says nothing is closed with `auth_timeout`, uncounted.

Before `hello` a socket is cheap to hold, and bounded: its frames are at most 64 KiB, refused by
the WebSocket protocol from the frame header under `pheby serve` (`pheby.protocol.ws_protocol`, which sends
the `too_large` error and closes with 1009; the handshake counts that close as a failed hello),
and each source address may hold at most 8 such sockets: a ninth is accepted, told `rate_limited`
and closed at once, uncounted. (Accepting first keeps the refusal a protocol error the client can
read; the socket costs nothing further.)
"""

import asyncio
import logging
from typing import Any, NamedTuple

import msgspec
from litestar import WebSocket
from msgspec import UNSET, UnsetType

from handlers.ws.hello import HELLO_DECODER
from handlers.ws.support.frames import (
    CLOSE_MESSAGE_TOO_BIG,
    Gone,
    frame_size,
    lift_frame_limit,
    peek_request_id,
    peek_type,
    receive_frame_or_close,
)
from handlers.ws.support.messages import MAX_REQUEST_ID_CHARS
from pheby import metrics
from pheby.auth import Principal
from pheby.protocol.append import granted
from pheby.protocol.frames import PROTOCOL_VERSION, Error, Event, encode_event, error_event
from pheby.protocol.json_input import decode_json
from pheby.protocol.ws_protocol import PRE_HELLO_MAX_BYTES, pre_hello_too_large
from pheby.services import Services

log = logging.getLogger("pheby.ws")

CLOSE_POLICY_VIOLATION = 1008


async def handshake(socket: WebSocket[Any, Any, Any], services: Services, address: str) -> "Welcome | None":
    """Who said a valid first-frame hello (account and credential), its request_id and the features
    granted; else None after an error and a close.

    The lockout is checked when the socket opens and again when its hello is judged, one hello
    of an address at a time: sockets opened earlier get no extra guesses once the address is
    locked, not even with the right secret.
    """
    if await services.hello_limiter.is_locked(address):
        await _refuse(socket, _locked_out(UNSET))
        return None
    waiting = services.sockets_before_hello
    if not waiting.try_take(address):
        await _refuse(socket, error_event("rate_limited", "Too many connections waiting to say hello"))
        return None
    try:
        return await _first_frame(socket, services, address)
    finally:
        waiting.give_back(address)


async def _first_frame(socket: WebSocket[Any, Any, Any], services: Services, address: str) -> "Welcome | None":
    limiter = services.hello_limiter
    try:
        raw = await asyncio.wait_for(receive_frame_or_close(socket), timeout=services.settings.ws_hello_timeout)
    except TimeoutError:
        await _refuse(socket, error_event("auth_timeout", "No hello within the time allowed"))
        return None
    if isinstance(raw, Gone):
        if raw.code == CLOSE_MESSAGE_TOO_BIG:  # the protocol refused an oversized frame and said so
            await limiter.record_failure(address)
        return None
    async with limiter.one_at_a_time(address):
        if await limiter.is_locked(address):
            verdict: Welcome | Error = _locked_out(peek_request_id(raw))
        else:
            verdict = await _judge(raw, services, socket)
            if isinstance(verdict, Error):
                await limiter.record_failure(address)
    if isinstance(verdict, Error):
        await _refuse(socket, verdict)
        return None
    lift_frame_limit(socket)
    return verdict


class Welcome(NamedTuple):
    principal: Principal
    request_id: str | UnsetType
    features: list[str] | UnsetType  # those granted; UNSET when the hello asked for none


class _VersionOnly(msgspec.Struct, frozen=True):
    protocol_version: Any = None


_VERSION_ONLY = msgspec.json.Decoder(_VersionOnly)


async def _judge(raw: bytes | str, services: Services, socket: WebSocket[Any, Any, Any]) -> Welcome | Error:
    """A welcome, or the handshake error that fits (each a failed hello).

    A hello that doesn't speak our protocol version is `version_mismatch` whatever else is in it,
    so a client of a later version is told why; anything else wrong is `unauthorized`, except a
    frame too large (`too_large`) and a request_id too long (`bad_request`).
    """
    request_id = peek_request_id(raw)
    if frame_size(raw, PRE_HELLO_MAX_BYTES) > PRE_HELLO_MAX_BYTES:
        return msgspec.structs.replace(pre_hello_too_large(), request_id=request_id)
    if peek_type(raw) != "hello":
        return error_event("unauthorized", "The first message must be hello", request_id)
    try:
        version = decode_json(_VERSION_ONLY, raw).protocol_version
    except msgspec.MsgspecError:  # parsed as JSON above, so not expected; still a failed hello, not a crash
        return error_event("unauthorized", "The first message must be hello", request_id)
    if type(version) is not int or version != PROTOCOL_VERSION:  # not 1.0, not true
        return error_event("version_mismatch", f"This server speaks protocol version {PROTOCOL_VERSION}", request_id)
    try:
        hello = decode_json(HELLO_DECODER, raw)
    except msgspec.MsgspecError as exc:
        if str(exc).endswith("at `$.request_id`"):
            return error_event("bad_request", f"request_id is limited to {MAX_REQUEST_ID_CHARS} characters")
        return error_event("unauthorized", f"Malformed hello: {exc}", request_id)
    authenticator = services.authenticator
    if hello.secret is UNSET:
        principal = await authenticator.from_session_cookie(socket)
        if principal is None:
            return error_event("unauthorized", "No secret, and no live session", request_id)
    else:
        principal = await authenticator.from_secret(hello.secret)
        if principal is None:
            return error_event("unauthorized", "Invalid secret", request_id)
    features = UNSET if hello.features is UNSET else granted(hello.features)
    return Welcome(principal, request_id, features)


def _locked_out(request_id: str | UnsetType) -> Error:
    metrics.LOCKOUTS.labels("hello").inc()
    return error_event("rate_limited", "Too many failed attempts; try again later", request_id)


async def _refuse(socket: WebSocket[Any, Any, Any], event: Event) -> None:
    metrics.HELLOS_REFUSED.labels(event_code(event)).inc()
    try:
        await socket.send_text(encode_event(event).decode())
        await socket.close(CLOSE_POLICY_VIOLATION, event_code(event))
    except Exception:  # noqa: BLE001 - the peer is already gone
        log.debug("peer left during a refused handshake")


def event_code(event: Event) -> str:
    error = getattr(event, "error", None)
    return str(getattr(error, "code", ""))

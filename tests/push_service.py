"""Pytest plugin: a Web Push service on loopback that checks what an application server sends, as a browser's does.

The server's Web Push sends are only tested for real if something on the other end refuses what FCM, Mozilla's
autopush or Apple's service would refuse. :class:`PushService` is that something: a real HTTP/1.1 server on
``127.0.0.1`` (a free port, a background thread) that hands out subscriptions the way a browser makes them and
checks every push sent to one:

* VAPID (RFC 8292): ``Authorization: vapid t=<JWT>, k=<key>``; ``k`` must be the application server key the
  test named with :meth:`PushService.expect_vapid`, the JWT's header ``ES256``/``JWT``, its signature valid for
  that key, ``aud`` the endpoint's origin, ``exp`` in the future and at most 24 h ahead, ``sub`` the subject the
  test named. No usable credentials: 401; credentials that fail a check: 403.
* Web Push (RFC 8030): ``TTL`` present (a non-negative integer), ``Urgency`` and ``Topic`` well-formed when
  present, a body of at most 4096 bytes (413 above). Anything else wrong: 400.
* Message encryption (RFC 8291): ``Content-Encoding: aes128gcm``, one record whose key id is the sender's
  uncompressed P-256 point, decrypted with the subscription's own private key and auth secret; the plaintext
  must be a JSON object (what Pheby sends). Not decryptable: 400.

A push that passes is answered ``201 Created`` with a ``Location`` (RFC 8030 §5) and recorded as a
:class:`Received` (payload, headers, VAPID claims, arrival time); one that fails is answered as a push service
answers and recorded as a :class:`Rejection` with the reason. Every request to a subscription is an
:class:`Attempt`, so a test can count tries.

Unhappy paths are scripted per subscription: :meth:`BrowserSubscription.answer` queues answers for the next
requests (``sub.answer(503, Answer(429, {"Retry-After": "1"}))``), :meth:`~BrowserSubscription.answer_always`
answers every later one (``410``: the browser unsubscribed), :meth:`~BrowserSubscription.hang` accepts and never
answers (until the service stops), :meth:`~BrowserSubscription.redirect_to` answers ``307``. A scripted answer
skips the checks' verdict, but the checks still run: :attr:`Attempt.problem` says what they would have refused.

:class:`RecordingListener` is a second loopback server that answers ``201`` to anything and records it: a
redirect target, or an address the server must never contact, shows with it that nothing arrived.

Registered from ``tests/conftest.py`` (``pytest_plugins = [..., "tests.push_service"]``), for the fixtures:

``push_service``        a started :class:`PushService`, stopped when the test ends
``recording_listener``  a started :class:`RecordingListener`, stopped when the test ends

Every wait is bounded; stopping ends hanging requests and closes every connection still open.
"""

import base64
import binascii
import contextlib
import json
import re
import secrets
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, Self

import http_ece
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from tests.polling import until

__all__ = [
    "HANG",
    "Answer",
    "Attempt",
    "BrowserSubscription",
    "Hang",
    "PushService",
    "Received",
    "RecordedRequest",
    "RecordingListener",
    "Rejection",
    "ScriptedAnswer",
]

MAX_PUSH_BODY: Final = 4096  # RFC 8030 §7.2: a push service has to take at least this much; Pheby stays within it
MAX_VAPID_LIFETIME_S: Final = 24 * 60 * 60  # RFC 8292 §2: exp no further than 24 hours ahead
MAX_READ_BODY: Final = 64 * 1024  # a larger body is answered 413 unread, and the connection closed
IDLE_TIMEOUT_S: Final = 30.0  # a kept-alive connection with no new request is closed after this
STOP_TIMEOUT_S: Final = 5.0  # the longest stop() waits for the server's threads
POLL_INTERVAL_S: Final = 0.02  # how often serve_forever looks for stop(); how often waits look again
URGENCIES: Final = frozenset({"very-low", "low", "normal", "high"})  # RFC 8030 §5.3
_TOPIC: Final = re.compile(r"[A-Za-z0-9_-]{1,32}")  # RFC 8030 §5.4: at most 32 base64url characters
_B64URL: Final = re.compile(r"[A-Za-z0-9_-]*")
_TTL: Final = re.compile(r"[0-9]+")
_PUSH_PATH: Final = re.compile(r"/push/([A-Za-z0-9_-]+)")
_AES128GCM_HEADER: Final = 21  # salt (16) + rs (4) + idlen (1), then the key id (RFC 8188 §2.1)
_P256_POINT: Final = 65  # an uncompressed P-256 point: 0x04, x, y
_GCM_TAG: Final = 16


# --- records --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request as it arrived at a loopback server."""

    method: str
    path: str
    headers: dict[str, str]  # names lower-cased; a repeated header's values joined with ", "
    body: bytes
    time: float  # time.monotonic() when its head had been read


@dataclass(frozen=True)
class Attempt:
    """A request that reached a subscription's endpoint, whatever it was answered."""

    request: RecordedRequest
    answered: int | None  # the status sent back; None while (or because) it was left hanging
    problem: str | None  # what the push service's checks found wrong with it; None if it passed them

    @property
    def time(self) -> float:
        return self.request.time


@dataclass(frozen=True)
class Received:
    """A push that passed every check: answered 201 and decrypted."""

    payload: dict[str, Any]  # the decrypted plaintext, parsed
    headers: dict[str, str]  # names lower-cased
    claims: dict[str, Any]  # the VAPID JWT's claims (aud, exp, sub)
    time: float  # time.monotonic() of its arrival

    @property
    def ttl(self) -> int:
        return int(self.headers["ttl"])

    @property
    def urgency(self) -> str:
        return self.headers.get("urgency", "normal")

    @property
    def topic(self) -> str | None:
        return self.headers.get("topic")


@dataclass(frozen=True)
class Rejection:
    """A request the push service refused on its checks (not a scripted answer)."""

    subscription_id: str | None  # None: the path named no subscription
    status: int
    reason: str
    request: RecordedRequest


# --- scripted answers -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """A scripted answer: a status and its headers (``Retry-After``, ``Location``), sent whatever the request."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Hang:
    """A scripted non-answer: the request is read and never answered, until the service stops."""


HANG: Final = Hang()
# What BrowserSubscription.answer and answer_always take: a bare status, an Answer, a (status, headers) pair, HANG.
ScriptedAnswer = int | Answer | tuple[int, Mapping[str, str]] | Hang


def _scripted(item: ScriptedAnswer) -> Answer | Hang:
    if isinstance(item, Answer | Hang):
        return item
    if isinstance(item, int):
        return Answer(item)
    status, headers = item
    return Answer(status, dict(headers))


# --- the loopback HTTP server both services run on ------------------------------------------------------------


@dataclass(frozen=True)
class _Reply:
    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""


# How a loopback server answers a request: a reply, or None to leave it hanging until the server stops.
_Responder = Callable[[RecordedRequest], _Reply | None]


def _error_reply(status: int, message: str, headers: Mapping[str, str] | None = None) -> _Reply:
    """An error as autopush words one: a small JSON body with the code, its phrase and the reason."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:  # a status a test made up
        phrase = ""
    body = {"code": status, "error": phrase, "message": message}
    return _Reply(status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(body).encode())


class _Server(ThreadingHTTPServer):
    """A ThreadingHTTPServer that knows its connections and their threads, so that stopping ends them."""

    daemon_threads = True
    request_queue_size = 128  # a real push service's backlog is deep; socketserver's 5 drops bursts of connections

    def __init__(self, respond: _Responder) -> None:
        self.respond = respond
        self.accepted = 0  # connections, ever
        self.stopping = threading.Event()  # set by stop(): hanging requests end, unanswered
        self._guard = threading.Lock()
        self._open_connections: set[socket.socket] = set()
        self._handler_threads: set[threading.Thread] = set()
        super().__init__(("127.0.0.1", 0), _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks the host's name up (getfqdn), which can take seconds; nothing here needs it.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "127.0.0.1", int(self.server_address[1])

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._guard:  # in the serving thread, before the connection's own starts: none is missed
            self._open_connections.add(request)
            self.accepted += 1
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        current = threading.current_thread()
        with self._guard:
            self._handler_threads.add(current)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._guard:
                self._handler_threads.discard(current)
                self._open_connections.discard(request)

    def end_connections(self, timeout: float) -> None:
        """Shut every open connection down (a read blocked on one returns) and wait, bounded, for the threads."""
        with self._guard:
            connections, threads = list(self._open_connections), list(self._handler_threads)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))


class _Handler(BaseHTTPRequestHandler):
    """Reads one request at a time (HTTP/1.1, kept alive) and sends what the server's responder decides."""

    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the records are the log."""

    def _serve(self) -> None:
        arrived = time.monotonic()
        if "transfer-encoding" in self.headers:
            self._reply(_error_reply(411, "chunked bodies are not read here: send Content-Length"), close=True)
            return
        try:
            length = int(self.headers.get("content-length", "0"))
        except ValueError:
            length = -1
        if length < 0:
            self._reply(_error_reply(400, "Content-Length is not a length"), close=True)
            return
        if length > MAX_READ_BODY:
            self._reply(_error_reply(413, f"a body of {length} bytes is not read here"), close=True)
            return
        body = self.rfile.read(length) if length else b""
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        request = RecordedRequest(self.command, self.path, headers, body, arrived)
        try:
            reply = self.server.respond(request)
        except Exception as exc:  # a fault of the fixture's own: answered, so that the test sees it
            reply = _error_reply(500, f"the loopback server failed: {exc!r}")
        if reply is None:
            self.server.stopping.wait()
            self.close_connection = True
            return
        self._reply(reply)

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _serve

    def _reply(self, reply: _Reply, *, close: bool = False) -> None:
        try:
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(reply.body)))
            if close:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(reply.body)
            self.wfile.flush()
        except OSError:
            self.close_connection = True
        if close:
            self.close_connection = True


class _Loopback:
    """A :class:`_Server` on ``127.0.0.1:<free port>``, serving in a background thread until :meth:`stop`."""

    def __init__(self, respond: _Responder, name: str) -> None:
        self._server = _Server(respond)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(POLL_INTERVAL_S,), name=name, daemon=True
        )

    @property
    def port(self) -> int:
        return self._server.server_port

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def accepted(self) -> int:
        return self._server.accepted

    def start(self) -> None:
        self._thread.start()  # the socket listens already: a request sent now waits in its backlog

    def stop(self) -> None:
        """End hanging requests, stop accepting, close what is still open; every wait bounded."""
        self._server.stopping.set()
        if self._thread.is_alive():
            self._server.shutdown()  # serve_forever looks every POLL_INTERVAL_S
            self._thread.join(STOP_TIMEOUT_S)
        self._server.end_connections(STOP_TIMEOUT_S)
        self._server.server_close()


# --- what the push service checks -----------------------------------------------------------------------------


class _Refused(Exception):
    """A check failed: the status a push service answers, and why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class _Accepted:
    """A push that passed the checks."""

    claims: dict[str, Any]
    payload: dict[str, Any]


@dataclass(frozen=True)
class _VapidExpectation:
    public_key: bytes  # the application server key, an uncompressed P-256 point
    subject: str


def _b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes:
    """Base64url without padding, strictly (JWS and the ``k`` parameter are written so): ValueError otherwise."""
    if not _B64URL.fullmatch(text) or len(text) % 4 == 1:
        raise ValueError("not unpadded base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except binascii.Error as exc:
        raise ValueError(str(exc)) from exc


def _p256_key(point: bytes) -> ec.EllipticCurvePublicKey:
    if len(point) != _P256_POINT or point[0] != 4:
        raise ValueError(f"not an uncompressed P-256 point ({len(point)} bytes)")
    return ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)


def _json_object(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{what} is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{what} is JSON but not an object: {type(value).__name__}")
    return value


def _vapid_credentials(authorization: str | None) -> tuple[str, str]:
    """The ``t`` and ``k`` of ``Authorization: vapid t=..., k=...`` (RFC 8292 §3); 401 when there are none."""
    if authorization is None:
        raise _Refused(401, "no Authorization header")
    scheme, _, rest = authorization.strip().partition(" ")
    if scheme.lower() != "vapid":
        raise _Refused(401, f"the Authorization scheme is {scheme!r}, not vapid")
    params: dict[str, str] = {}
    for part in rest.split(","):
        name, equals, value = part.strip().partition("=")
        name = name.strip().lower()
        if not equals or not name or name in params:
            raise _Refused(401, f"the vapid credentials are malformed: {rest!r}")
        params[name] = value.strip()
    if "t" not in params or "k" not in params:
        raise _Refused(401, f"the vapid credentials lack t or k: {sorted(params)}")
    return params["t"], params["k"]


def _check_vapid(
    authorization: str | None, expected: _VapidExpectation | None, origin: str, now: float
) -> dict[str, Any]:
    """The VAPID claims, once the credentials, the JWT's signature and its claims pass; else :class:`_Refused`."""
    token, key_text = _vapid_credentials(authorization)
    if expected is None:
        raise _Refused(403, "no application server key is expected: the test did not call expect_vapid()")
    try:
        key_point = _b64url_decode(key_text)
    except ValueError as exc:
        raise _Refused(403, f"k is not base64url: {exc}") from None
    if key_point != expected.public_key:
        raise _Refused(403, "k is not the application server key the subscription was made with")
    parts = token.split(".")
    if len(parts) != 3:
        raise _Refused(403, f"the JWT has {len(parts)} parts, not 3")
    try:
        header = _json_object(_b64url_decode(parts[0]), "the JWT header")
        claims = _json_object(_b64url_decode(parts[1]), "the JWT claims")
        signature = _b64url_decode(parts[2])
    except ValueError as exc:
        raise _Refused(403, f"the JWT is malformed: {exc}") from None
    if header.get("alg") != "ES256" or str(header.get("typ", "")).upper() != "JWT":
        raise _Refused(403, f"the JWT header is not ES256/JWT: {header}")
    if len(signature) != 64:
        raise _Refused(403, f"the JWT signature is {len(signature)} bytes, not a JOSE ES256 r||s of 64")
    r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
    try:
        _p256_key(key_point).verify(
            encode_dss_signature(r, s), f"{parts[0]}.{parts[1]}".encode("ascii"), ec.ECDSA(hashes.SHA256())
        )
    except (InvalidSignature, ValueError):
        raise _Refused(403, "the JWT signature does not verify with k") from None
    if claims.get("aud") != origin:
        raise _Refused(403, f"aud is {claims.get('aud')!r}, not the endpoint's origin {origin!r}")
    exp = claims.get("exp")
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        raise _Refused(403, f"exp is not a NumericDate: {exp!r}")
    if exp <= now:
        raise _Refused(403, f"exp is {now - exp:.0f} s in the past")
    if exp > now + MAX_VAPID_LIFETIME_S:
        raise _Refused(403, f"exp is {exp - now:.0f} s ahead, more than 24 h")
    if claims.get("sub") != expected.subject:
        raise _Refused(403, f"sub is {claims.get('sub')!r}, not {expected.subject!r}")
    return claims


def _check_push_headers(headers: Mapping[str, str]) -> None:
    ttl = headers.get("ttl")
    if ttl is None:
        raise _Refused(400, "no TTL header")
    if not _TTL.fullmatch(ttl.strip()):
        raise _Refused(400, f"TTL is not a non-negative integer: {ttl!r}")
    encoding = headers.get("content-encoding")
    if encoding is None or encoding.strip().lower() != "aes128gcm":
        raise _Refused(400, f"Content-Encoding is {encoding!r}, not aes128gcm")
    urgency = headers.get("urgency")
    if urgency is not None and urgency.strip() not in URGENCIES:
        raise _Refused(400, f"Urgency is {urgency!r}, not one of {sorted(URGENCIES)}")
    topic = headers.get("topic")
    if topic is not None and not _TOPIC.fullmatch(topic):
        raise _Refused(400, f"Topic is {topic!r}, not 1-32 characters of base64url")


def _decrypt(body: bytes, private_key: ec.EllipticCurvePrivateKey, auth_secret: bytes) -> dict[str, Any]:
    """The plaintext of an aes128gcm push message (RFC 8291 §4), parsed; else :class:`_Refused` (400)."""
    if not body:
        raise _Refused(400, "the push has no body; Pheby's pushes carry an encrypted JSON payload")
    if len(body) > MAX_PUSH_BODY:
        raise _Refused(413, f"the body is {len(body)} bytes, more than {MAX_PUSH_BODY}")
    if len(body) < _AES128GCM_HEADER + _P256_POINT + _GCM_TAG + 1:
        raise _Refused(400, f"the body is too short for an aes128gcm push message: {len(body)} bytes")
    (record_size,) = struct.unpack("!L", body[16:20])
    key_id_length = body[20]
    records = body[_AES128GCM_HEADER + key_id_length :]
    if key_id_length != _P256_POINT or body[_AES128GCM_HEADER] != 4:
        raise _Refused(400, f"the aes128gcm key id is {key_id_length} bytes, not the sender's uncompressed point")
    if len(records) >= record_size:
        raise _Refused(400, f"the message is not one record: rs {record_size}, {len(records)} bytes of records")
    try:
        plaintext = http_ece.decrypt(body, private_key=private_key, auth_secret=auth_secret, version="aes128gcm")
    except (http_ece.ECEException, ValueError) as exc:
        raise _Refused(400, f"the body does not decrypt with the subscription's keys: {exc}") from None
    try:
        return _json_object(bytes(plaintext), "the plaintext")
    except ValueError as exc:
        raise _Refused(400, str(exc)) from None


# --- subscriptions and the service ----------------------------------------------------------------------------


class BrowserSubscription:
    """What a browser's ``pushManager.subscribe()`` makes, and what the push service saw sent to it.

    Made by :meth:`PushService.subscribe`: a fresh P-256 key pair, a 16-byte auth secret, an endpoint on the
    service. Its scripted answers and records are shared with the service's thread, behind the service's lock.
    """

    def __init__(self, origin: str, subscription_id: str, lock: threading.Lock, events: tuple[str, ...] | None) -> None:
        self.id = subscription_id
        self.endpoint = f"{origin}/push/{subscription_id}"
        self.events = events  # what the browser asks to be told of; kept for the test to register, unused here
        self._origin = origin
        self._lock = lock
        self._private_key = ec.generate_private_key(ec.SECP256R1())
        self._auth_secret = secrets.token_bytes(16)
        self._queued: list[Answer | Hang] = []
        self._always: Answer | Hang | None = None
        self._attempts: list[Attempt] = []
        self._received: list[Received] = []
        self._rejections: list[Rejection] = []

    def to_json(self) -> dict[str, Any]:
        """Exactly what ``PushSubscription.toJSON()`` gives, as the browser posts it to the server."""
        point = self._private_key.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
        return {
            "endpoint": self.endpoint,
            "expirationTime": None,
            "keys": {"p256dh": _b64url_encode(point), "auth": _b64url_encode(self._auth_secret)},
        }

    # --- scripting ------------------------------------------------------------------------------------------

    def answer(self, *answers: ScriptedAnswer) -> None:
        """Answer the next requests with these, in order (after those queued before), whatever they carry; then as
        before (:meth:`answer_always`'s answer, or the checks')."""
        if not answers:
            raise ValueError("answer() needs at least one answer")
        with self._lock:
            self._queued.extend(_scripted(item) for item in answers)

    def answer_always(self, answer: ScriptedAnswer) -> None:
        """Answer every later request with this once the queued answers are used (``410``: unsubscribed)."""
        with self._lock:
            self._always = _scripted(answer)

    def hang(self) -> None:
        """Read every later request and never answer it, until the service stops."""
        self.answer_always(HANG)

    def redirect_to(self, url: str) -> None:
        """Answer every later request ``307 Temporary Redirect`` to ``url`` (which a sender must not follow)."""
        self.answer_always(Answer(307, {"Location": url}))

    # --- records --------------------------------------------------------------------------------------------

    @property
    def attempts(self) -> list[Attempt]:
        """Every request that reached the endpoint, oldest first."""
        with self._lock:
            return list(self._attempts)

    @property
    def received(self) -> list[Received]:
        """The pushes accepted (201) and decrypted, oldest first."""
        with self._lock:
            return list(self._received)

    @property
    def rejections(self) -> list[Rejection]:
        """The requests refused on the checks, oldest first."""
        with self._lock:
            return list(self._rejections)

    async def wait_for(self, count: int = 1, timeout: float = 10.0) -> list[Received]:
        """Wait (bounded) until at least ``count`` pushes were accepted; all those accepted."""
        try:
            await until(lambda: len(self.received) >= count, "", timeout, POLL_INTERVAL_S)
        except AssertionError:
            raise AssertionError(self._shortfall(count, timeout)) from None
        return self.received

    def wait_for_blocking(self, count: int = 1, timeout: float = 10.0) -> list[Received]:
        """:meth:`wait_for` for a test without an event loop."""
        deadline = time.monotonic() + timeout
        while len(self.received) < count:
            if time.monotonic() > deadline:
                raise AssertionError(self._shortfall(count, timeout))
            time.sleep(POLL_INTERVAL_S)
        return self.received

    async def wait_for_attempts(self, count: int = 1, timeout: float = 10.0) -> list[Attempt]:
        """Wait (bounded) until at least ``count`` requests arrived, however answered; all of them."""
        await until(
            lambda: len(self.attempts) >= count, f"fewer than {count} requests reached {self.endpoint}", timeout
        )
        return self.attempts

    def _shortfall(self, count: int, timeout: float) -> str:
        reasons = [f"{r.status} {r.reason}" for r in self.rejections]
        return (
            f"{len(self.received)} of {count} pushes accepted at {self.endpoint} within {timeout} s; "
            f"{len(self.attempts)} requests arrived; refused: {reasons or 'none'}"
        )

    # --- the service's thread -------------------------------------------------------------------------------

    def _handle(self, request: RecordedRequest, expected: _VapidExpectation | None) -> _Reply | None:
        """Check a push sent to this endpoint, record it, and answer it (as scripted, or as the checks say)."""
        verdict = self._check(request, expected)
        problem = verdict.reason if isinstance(verdict, _Refused) else None
        with self._lock:
            if request.method != "POST":  # not a push: no scripted answer is used up on it
                return self._refuse(
                    request, _Refused(405, f"a push is a POST, not {request.method}"), {"Allow": "POST"}
                )
            scripted = self._queued.pop(0) if self._queued else self._always
            if isinstance(scripted, Hang):
                self._attempts.append(Attempt(request, None, problem))
                return None
            if isinstance(scripted, Answer):
                self._attempts.append(Attempt(request, scripted.status, problem))
                if scripted.status >= 400:
                    return _error_reply(scripted.status, "scripted by the test", scripted.headers)
                return _Reply(scripted.status, scripted.headers)
            if isinstance(verdict, _Refused):
                return self._refuse(request, verdict)
            self._attempts.append(Attempt(request, 201, None))
            self._received.append(Received(verdict.payload, dict(request.headers), verdict.claims, request.time))
        return _Reply(201, {"Location": f"{self._origin}/message/{secrets.token_urlsafe(12)}"})

    def _refuse(self, request: RecordedRequest, refused: _Refused, headers: Mapping[str, str] | None = None) -> _Reply:
        """Record a refusal on the checks (the lock held) and answer it."""
        self._attempts.append(Attempt(request, refused.status, refused.reason))
        rejection = Rejection(self.id, refused.status, refused.reason, request)
        self._rejections.append(rejection)
        return _error_reply(refused.status, refused.reason, headers)

    def _check(self, request: RecordedRequest, expected: _VapidExpectation | None) -> _Accepted | _Refused:
        """What a push service makes of the request: its claims and payload, or why it is refused."""
        try:
            claims = _check_vapid(request.headers.get("authorization"), expected, self._origin, time.time())
            _check_push_headers(request.headers)
            return _Accepted(claims, _decrypt(request.body, self._private_key, self._auth_secret))
        except _Refused as refused:
            return refused


class _OnLoopback:
    """What both loopback servers share: started and stopped (also as a context manager), on a port."""

    _loopback: _Loopback

    def start(self) -> Self:
        self._loopback.start()
        return self

    def stop(self) -> None:
        """Stop: requests left hanging end unanswered, open connections close; waits are bounded."""
        self._loopback.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._loopback.port


class PushService(_OnLoopback):
    """A loopback push service: hands out :class:`BrowserSubscription`\\ s and checks what is sent to them.

    ``with PushService() as service:`` (or the ``push_service`` fixture); :meth:`expect_vapid` before the first
    push, with the key and subject the server signs with.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscriptions: dict[str, BrowserSubscription] = {}
        self._expected: _VapidExpectation | None = None
        self._requests_total = 0
        self._unrouted: list[Rejection] = []  # requests to no subscription
        self._loopback = _Loopback(self._respond, "push-service")

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:<port>``: every endpoint's origin, the ``aud`` its VAPID JWTs must name."""
        return self._loopback.origin

    def subscribe(self, events: list[str] | tuple[str, ...] | None = None) -> BrowserSubscription:
        """A new subscription, as a browser makes one (``events``: kept on it for the test to register)."""
        subscription_id = secrets.token_urlsafe(16)
        subscription = BrowserSubscription(
            self.origin, subscription_id, self._lock, tuple(events) if events is not None else None
        )
        with self._lock:
            self._subscriptions[subscription_id] = subscription
        return subscription

    def expect_vapid(self, public_key_b64url: str, subject: str) -> None:
        """Require this application server key (base64url uncompressed P-256 point, as ``GET /api/push/config``
        gives it) and this ``sub`` claim (a ``mailto:`` or ``https:`` URL) of every push."""
        point = _b64url_decode(public_key_b64url)
        _p256_key(point)
        if not subject.startswith(("mailto:", "https:")):
            raise ValueError(f"a VAPID subject is a mailto: or https: URL, not {subject!r}")
        with self._lock:
            self._expected = _VapidExpectation(point, subject)

    @property
    def connections_accepted(self) -> int:
        """How many TCP connections it has accepted: fewer than requests when the sender keeps them alive."""
        return self._loopback.accepted

    @property
    def requests_total(self) -> int:
        """How many requests arrived at all, on any path."""
        with self._lock:
            return self._requests_total

    @property
    def rejections(self) -> list[Rejection]:
        """Every request refused on the checks, to any subscription or none, oldest first."""
        with self._lock:
            found, subscriptions = list(self._unrouted), list(self._subscriptions.values())
        found += [rejection for subscription in subscriptions for rejection in subscription.rejections]
        return sorted(found, key=lambda rejection: rejection.request.time)

    def _respond(self, request: RecordedRequest) -> _Reply | None:
        with self._lock:
            self._requests_total += 1
            found = _PUSH_PATH.fullmatch(request.path)
            subscription = self._subscriptions.get(found.group(1)) if found else None
            expected = self._expected
            if subscription is None:
                rejection = Rejection(None, 404, f"no subscription at {request.path}", request)
                self._unrouted.append(rejection)
                return _error_reply(404, rejection.reason)
        return subscription._handle(request, expected)


class RecordingListener(_OnLoopback):
    """A loopback HTTP server that answers ``201`` to every request and records it: shows what was contacted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._loopback = _Loopback(self._respond, "recording-listener")

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``; any path under it is answered and recorded."""
        return self._loopback.origin

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def _respond(self, request: RecordedRequest) -> _Reply:
        with self._lock:
            self._requests.append(request)
        return _Reply(201)


@pytest.fixture(name="push_service")
def push_service_fixture() -> Iterator[PushService]:
    """A started :class:`PushService`, stopped when the test ends."""
    with PushService() as service:
        yield service


@pytest.fixture(name="recording_listener")
def recording_listener_fixture() -> Iterator[RecordingListener]:
    """A started :class:`RecordingListener`, stopped when the test ends."""
    with RecordingListener() as listener:
        yield listener

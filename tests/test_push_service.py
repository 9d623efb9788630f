"""The loopback push service (tests/push_service.py) refuses what a browser's push service refuses.

Pushes here are made as an application server makes them (pywebpush's steps): the VAPID JWT signed by
``py_vapid.Vapid02``, the payload encrypted by ``http_ece`` with an ephemeral sender key for the subscription's
``p256dh`` and ``auth`` (read back from its ``toJSON()`` form), sent with httpx. Each refusal case spoils one
part of an otherwise good push, so a check taken out of the service makes its case fail.
"""

import base64
import http.client
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
import http_ece
import httpx
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from py_vapid import Vapid02

from tests.push_service import HANG, Answer, BrowserSubscription, PushService, RecordingListener

pytestmark = [pytest.mark.anyio, pytest.mark.live]

SUBJECT = "mailto:ops@example.com"
PAYLOAD = {"kind": "run.finished", "conversation": "c-1", "title": "Done"}


def origin_of(endpoint: str) -> str:
    parts = urlsplit(endpoint)
    return f"{parts.scheme}://{parts.netloc}"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class AppServer:
    """The sending side: a VAPID key pair and the subject it signs as."""

    vapid: Any  # py_vapid.Vapid02 (untyped)
    subject: str = SUBJECT

    @classmethod
    def new(cls) -> "AppServer":
        vapid = Vapid02()
        vapid.generate_keys()
        return cls(vapid)

    @property
    def public_key(self) -> str:
        """The application server key as ``GET /api/push/config`` gives it."""
        return b64url(self.vapid.public_key.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint))

    def authorization(self, endpoint: str, **claims: Any) -> str:
        """``vapid t=<JWT>,k=<key>`` for the endpoint's origin, 12 h ahead; ``claims`` override."""
        values = {"aud": origin_of(endpoint), "sub": self.subject, "exp": int(time.time()) + 43200}
        values.update(claims)
        return str(self.vapid.sign(values)["Authorization"])


def encrypt(subscription: dict[str, Any], plaintext: bytes, *, rs: int = 4096) -> bytes:
    """aes128gcm for the subscription's keys, from a fresh ephemeral sender key (RFC 8291 §3)."""
    keys = subscription["keys"]
    sender = ec.generate_private_key(ec.SECP256R1())
    return bytes(
        http_ece.encrypt(
            plaintext,
            private_key=sender,
            dh=unb64url(keys["p256dh"]),
            auth_secret=unb64url(keys["auth"]),
            version="aes128gcm",
            rs=rs,
        )
    )


def stranger() -> dict[str, Any]:
    """Another browser's subscription, at nobody's endpoint: keys the service does not hold."""
    point = (
        ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
    )
    keys = {"p256dh": b64url(point), "auth": b64url(b"0123456789abcdef")}
    return {"endpoint": "http://127.0.0.1:9/push/x", "expirationTime": None, "keys": keys}


@dataclass
class Push:
    """One push request, made right; a refusal case spoils one part of it."""

    headers: dict[str, str]
    body: bytes

    @classmethod
    def to(cls, app: AppServer, subscription: BrowserSubscription, **claims: Any) -> "Push":
        headers = {
            "Authorization": app.authorization(subscription.endpoint, **claims),
            "TTL": "60",
            "Content-Encoding": "aes128gcm",
            "Content-Type": "application/octet-stream",
        }
        return cls(headers, encrypt(subscription.to_json(), json.dumps(PAYLOAD).encode()))

    async def send(
        self, client: httpx.AsyncClient, subscription: BrowserSubscription, *, timeout: float = 5.0
    ) -> httpx.Response:
        return await client.post(subscription.endpoint, headers=self.headers, content=self.body, timeout=timeout)


@pytest.fixture
def app(push_service: PushService) -> AppServer:
    """An application server the service expects, as the server's VAPID settings make it expected."""
    server = AppServer.new()
    push_service.expect_vapid(server.public_key, server.subject)
    return server


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5) as http:
        yield http


async def test_a_subscription_is_what_a_browser_makes(push_service: PushService) -> None:
    sub = push_service.subscribe(events=["run.finished"])
    other = push_service.subscribe()
    data = sub.to_json()
    assert set(data) == {"endpoint", "expirationTime", "keys"}
    assert data["endpoint"] == sub.endpoint == f"http://127.0.0.1:{push_service.port}/push/{sub.id}"
    assert data["expirationTime"] is None
    assert set(data["keys"]) == {"p256dh", "auth"}
    for value in data["keys"].values():
        assert "=" not in value
        assert b64url(unb64url(value)) == value
    point = unb64url(data["keys"]["p256dh"])
    assert len(point) == 65
    assert point[0] == 4
    ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
    assert len(unb64url(data["keys"]["auth"])) == 16
    assert sub.events == ("run.finished",)
    assert other.id != sub.id
    assert other.to_json()["keys"] != data["keys"]


@pytest.mark.parametrize("separator", [",", ", "])
async def test_a_correct_push_is_accepted_and_decrypted(
    push_service: PushService, app: AppServer, client: httpx.AsyncClient, separator: str
) -> None:
    sub = push_service.subscribe()
    push = Push.to(app, sub)
    push.headers["Authorization"] = push.headers["Authorization"].replace(",k=", f"{separator}k=")
    push.headers.update({"Urgency": "high", "Topic": "run-finished_c1"})
    before = time.monotonic()

    response = await push.send(client, sub)

    assert response.status_code == 201, response.text
    assert response.headers["location"].startswith(f"{push_service.origin}/message/")
    [received] = await sub.wait_for(1, timeout=5)
    assert received.payload == PAYLOAD
    assert received.claims["aud"] == push_service.origin
    assert received.claims["sub"] == SUBJECT
    assert (received.ttl, received.urgency, received.topic) == (60, "high", "run-finished_c1")
    assert received.headers["content-encoding"] == "aes128gcm"
    assert before <= received.time <= time.monotonic()
    assert sub.wait_for_blocking(1, timeout=1) == [received]
    assert [(a.answered, a.problem) for a in sub.attempts] == [(201, None)]
    assert sub.rejections == push_service.rejections == []
    assert push_service.requests_total == 1


def stranger_token(app: AppServer, sub: BrowserSubscription) -> str:
    """A JWT for the right claims signed by another key, sent under the expected ``k``: its signature fails."""
    token = AppServer.new().authorization(sub.endpoint).split("t=", 1)[1].split(",", 1)[0]
    return f"vapid t={token},k={app.public_key}"


def hand_signed(
    header: dict[str, Any] | None = None, *, der: bool = False
) -> Callable[[AppServer, BrowserSubscription], str]:
    """``vapid t=..., k=...`` with a JWT made by hand: this header (ES256/JWT's by default), the right claims,
    signed by the application server's key; ``der``: the signature left in cryptography's DER form, not JOSE's."""

    def make(app: AppServer, sub: BrowserSubscription) -> str:
        claims = {"aud": origin_of(sub.endpoint), "sub": app.subject, "exp": int(time.time()) + 60}
        parts = (header or {"typ": "JWT", "alg": "ES256"}, claims)
        signing_input = ".".join(b64url(json.dumps(part).encode()) for part in parts)
        signature = app.vapid.private_key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        if not der:
            r, s = decode_dss_signature(signature)
            signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"vapid t={signing_input}.{b64url(signature)}, k={app.public_key}"

    return make


def spoil_headers(**changes: str | None) -> Callable[[AppServer, BrowserSubscription], Push]:
    def make(app: AppServer, sub: BrowserSubscription) -> Push:
        push = Push.to(app, sub)
        for name, value in changes.items():
            header = name.replace("_", "-")
            if value is None:
                del push.headers[header]
            else:
                push.headers[header] = value
        return push

    return make


def with_claims(**claims: Any) -> Callable[[AppServer, BrowserSubscription], Push]:
    return lambda app, sub: Push.to(app, sub, **claims)


def with_authorization(
    make: Callable[[AppServer, BrowserSubscription], str],
) -> Callable[[AppServer, BrowserSubscription], Push]:
    def build(app: AppServer, sub: BrowserSubscription) -> Push:
        push = Push.to(app, sub)
        push.headers["Authorization"] = make(app, sub)
        return push

    return build


def with_exp(seconds_ahead: int) -> Callable[[AppServer, BrowserSubscription], Push]:
    """``exp`` this far from when the push is made (not from when the cases were collected)."""
    return lambda app, sub: Push.to(app, sub, exp=int(time.time()) + seconds_ahead)


def with_body(make: Callable[[BrowserSubscription], bytes]) -> Callable[[AppServer, BrowserSubscription], Push]:
    def build(app: AppServer, sub: BrowserSubscription) -> Push:
        push = Push.to(app, sub)
        push.body = make(sub)
        return push

    return build


def big_payload(sub: BrowserSubscription) -> bytes:
    return encrypt(sub.to_json(), json.dumps({"text": "x" * 5000}).encode(), rs=8192)


REFUSALS = [
    pytest.param(spoil_headers(Authorization=None), 401, "no Authorization header", id="no-authorization"),
    pytest.param(
        with_authorization(lambda app, sub: app.authorization(sub.endpoint).replace("vapid ", "WebPush ")),
        401,
        "not vapid",
        id="other-scheme",
    ),
    pytest.param(
        with_authorization(lambda app, sub: AppServer.new().authorization(sub.endpoint)),
        403,
        "k is not the application server key",
        id="wrong-vapid-key",
    ),
    pytest.param(with_authorization(stranger_token), 403, "signature does not verify", id="bad-signature"),
    pytest.param(
        with_authorization(hand_signed({"typ": "JWT", "alg": "HS256"})), 403, "not ES256/JWT", id="jwt-alg-not-es256"
    ),
    pytest.param(
        with_authorization(hand_signed({"typ": "JOSE+JSON", "alg": "ES256"})),
        403,
        "not ES256/JWT",
        id="jwt-typ-not-jwt",
    ),
    pytest.param(with_authorization(hand_signed(der=True)), 403, "not a JOSE ES256 r||s", id="der-signature"),
    pytest.param(with_claims(aud="http://127.0.0.1:1"), 403, "aud is", id="wrong-aud"),
    pytest.param(with_claims(aud="http://localhost:1"), 403, "aud is", id="aud-another-host"),
    pytest.param(with_exp(-60), 403, "in the past", id="expired"),
    pytest.param(with_exp(25 * 3600), 403, "more than 24 h", id="exp-beyond-24h"),
    pytest.param(with_claims(sub="mailto:someone-else@example.com"), 403, "sub is", id="wrong-sub"),
    pytest.param(spoil_headers(TTL=None), 400, "no TTL header", id="no-ttl"),
    pytest.param(spoil_headers(TTL="-1"), 400, "TTL is not", id="negative-ttl"),
    pytest.param(spoil_headers(Content_Encoding="aesgcm"), 400, "not aes128gcm", id="aesgcm"),
    pytest.param(spoil_headers(Content_Encoding=None), 400, "not aes128gcm", id="no-content-encoding"),
    pytest.param(spoil_headers(Urgency="urgent"), 400, "Urgency is", id="bad-urgency"),
    pytest.param(spoil_headers(Topic="t" * 33), 400, "Topic is", id="long-topic"),
    pytest.param(spoil_headers(Topic="run finished"), 400, "Topic is", id="topic-not-base64url"),
    pytest.param(
        with_body(lambda sub: encrypt(stranger(), json.dumps(PAYLOAD).encode())),
        400,
        "does not decrypt",
        id="other-subscriptions-keys",
    ),
    pytest.param(with_body(lambda sub: encrypt(sub.to_json(), b"not json")), 400, "not JSON", id="not-json"),
    pytest.param(with_body(lambda sub: encrypt(sub.to_json(), b"[1, 2]")), 400, "not an object", id="json-not-object"),
    pytest.param(
        with_body(lambda sub: encrypt(sub.to_json(), json.dumps(PAYLOAD).encode(), rs=40)),
        400,
        "not one record",
        id="several-records",
    ),
    pytest.param(with_body(lambda sub: b""), 400, "no body", id="no-body"),
    pytest.param(with_body(big_payload), 413, "more than 4096", id="over-4096-bytes"),
]


@pytest.mark.parametrize(("make", "status", "reason"), REFUSALS)
async def test_a_spoiled_push_is_refused_with_its_reason(
    push_service: PushService,
    app: AppServer,
    client: httpx.AsyncClient,
    make: Callable[[AppServer, BrowserSubscription], Push],
    status: int,
    reason: str,
) -> None:
    sub = push_service.subscribe()

    response = await make(app, sub).send(client, sub)

    assert response.status_code == status, response.text
    assert reason in response.json()["message"]
    [rejection] = sub.rejections
    assert (rejection.status, rejection.subscription_id) == (status, sub.id)
    assert reason in rejection.reason
    assert push_service.rejections == [rejection]
    assert sub.received == []
    assert [(a.answered, a.problem) for a in sub.attempts] == [(status, rejection.reason)]


async def test_a_jwt_made_by_hand_is_accepted_too(
    push_service: PushService, app: AppServer, client: httpx.AsyncClient
) -> None:
    """The refusal cases that make their JWT by hand spoil only what they say they spoil."""
    sub = push_service.subscribe()
    push = Push.to(app, sub)
    push.headers["Authorization"] = hand_signed()(app, sub)
    response = await push.send(client, sub)
    assert response.status_code == 201, response.text


async def test_without_expect_vapid_every_push_is_refused(push_service: PushService, client: httpx.AsyncClient) -> None:
    sub = push_service.subscribe()
    response = await Push.to(AppServer.new(), sub).send(client, sub)
    assert response.status_code == 403
    assert "expect_vapid" in sub.rejections[0].reason


async def test_waiting_for_a_push_that_was_refused_says_why(
    push_service: PushService, app: AppServer, client: httpx.AsyncClient
) -> None:
    sub = push_service.subscribe()
    await spoil_headers(TTL=None)(app, sub).send(client, sub)
    with pytest.raises(AssertionError, match=r"0 of 1 pushes accepted.*400 no TTL header"):
        await sub.wait_for(1, timeout=0.1)


async def test_scripted_answers_come_first_then_the_checks(
    push_service: PushService, app: AppServer, client: httpx.AsyncClient
) -> None:
    sub = push_service.subscribe()
    sub.answer(503, (503, {"Retry-After": "2"}))

    statuses = [(await Push.to(app, sub).send(client, sub)) for _ in range(3)]

    assert [r.status_code for r in statuses] == [503, 503, 201]
    assert "retry-after" not in statuses[0].headers
    assert statuses[1].headers["retry-after"] == "2"
    assert [(a.answered, a.problem) for a in sub.attempts] == [(503, None), (503, None), (201, None)]
    assert [r.payload for r in await sub.wait_for(1)] == [PAYLOAD]
    assert push_service.requests_total == 3


async def test_answer_always_410_answers_every_push_and_still_checks_it(
    push_service: PushService, app: AppServer, client: httpx.AsyncClient
) -> None:
    sub = push_service.subscribe()
    sub.answer_always(410)

    good = await Push.to(app, sub).send(client, sub)
    again = await Push.to(app, sub).send(client, sub)
    spoiled = await spoil_headers(TTL=None)(app, sub).send(client, sub)

    assert [r.status_code for r in (good, again, spoiled)] == [410, 410, 410]
    assert [(a.answered, a.problem) for a in sub.attempts] == [(410, None), (410, None), (410, "no TTL header")]
    assert sub.received == []
    assert sub.rejections == []  # a scripted answer is not the checks' refusal


async def test_a_queued_hang_holds_only_the_next_request(
    push_service: PushService, app: AppServer, client: httpx.AsyncClient
) -> None:
    sub = push_service.subscribe()
    sub.answer(HANG, Answer(202))

    with pytest.raises(httpx.ReadTimeout):
        await Push.to(app, sub).send(client, sub, timeout=0.3)
    accepted = await Push.to(app, sub).send(client, sub)
    after = await Push.to(app, sub).send(client, sub)

    assert (accepted.status_code, after.status_code) == (202, 201)
    assert [a.answered for a in sub.attempts] == [None, 202, 201]


async def test_hang_holds_every_request_until_the_service_stops(client: httpx.AsyncClient) -> None:
    service = PushService().start()
    try:
        app = AppServer.new()
        service.expect_vapid(app.public_key, app.subject)
        sub = service.subscribe()
        sub.hang()
        push = Push.to(app, sub)
        with pytest.raises(httpx.ReadTimeout):
            await push.send(client, sub, timeout=0.3)

        ended: list[BaseException] = []

        async def held() -> None:
            try:
                await push.send(client, sub, timeout=10)
            except httpx.HTTPError as exc:
                ended.append(exc)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(held)
            await sub.wait_for_attempts(2, timeout=5)
            started = time.monotonic()
            await anyio.to_thread.run_sync(service.stop)
            stopping_took = time.monotonic() - started
    finally:
        service.stop()

    assert stopping_took < 1.5
    assert len(ended) == 1
    assert isinstance(ended[0], httpx.RemoteProtocolError | httpx.ReadError)
    assert [(a.answered, a.problem) for a in sub.attempts] == [(None, None), (None, None)]
    assert sub.received == []


async def test_redirect_answers_307_and_its_target_is_not_contacted(
    push_service: PushService, app: AppServer, client: httpx.AsyncClient, recording_listener: RecordingListener
) -> None:
    sub = push_service.subscribe()
    target = f"{recording_listener.url}/push/elsewhere"
    sub.redirect_to(target)

    response = await Push.to(app, sub).send(client, sub)

    assert response.status_code == 307
    assert response.headers["location"] == target
    assert [a.answered for a in sub.attempts] == [307]
    assert recording_listener.requests == []


async def test_the_recording_listener_answers_201_and_records(
    recording_listener: RecordingListener, client: httpx.AsyncClient
) -> None:
    response = await client.post(f"{recording_listener.url}/anything?x=1", content=b"hello", headers={"X-Seen": "yes"})
    assert response.status_code == 201
    [request] = recording_listener.requests
    assert (request.method, request.path, request.body) == ("POST", "/anything?x=1", b"hello")
    assert request.headers["x-seen"] == "yes"


async def test_a_request_that_is_not_a_post_is_refused_405(
    push_service: PushService, app: AppServer, client: httpx.AsyncClient
) -> None:
    sub = push_service.subscribe()
    sub.answer(503)
    response = await client.get(sub.endpoint)
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert [(a.answered, r.status) for a, r in zip(sub.attempts, sub.rejections, strict=True)] == [(405, 405)]
    assert (await Push.to(app, sub).send(client, sub)).status_code == 503  # the scripted answer is still there


async def test_a_push_to_no_subscription_is_404_and_counted(
    push_service: PushService, client: httpx.AsyncClient
) -> None:
    response = await client.post(f"{push_service.origin}/push/nobody", content=b"x", headers={"TTL": "0"})
    assert response.status_code == 404
    assert push_service.requests_total == 1
    [rejection] = push_service.rejections
    assert (rejection.subscription_id, rejection.status) == (None, 404)


def test_stopping_closes_kept_alive_connections() -> None:
    service = PushService().start()
    connection = http.client.HTTPConnection("127.0.0.1", service.port, timeout=5)
    try:
        connection.request("GET", "/push/nobody")
        response = connection.getresponse()
        response.read()
        assert (response.status, response.getheader("connection")) == (404, None)  # kept alive
        assert connection.sock is not None
        started = time.monotonic()
        service.stop()
        assert connection.sock.recv(1) == b""
        assert time.monotonic() - started < 1.5
    finally:
        connection.close()
        service.stop()

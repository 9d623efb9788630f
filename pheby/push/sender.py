"""One push message to one subscription: encrypted (RFC 8291), signed (RFC 8292), sent (RFC 8030).

The request goes to the address `EndpointPolicy` checked just before (the endpoint's host stays the
TLS server name and the `Host`), redirects are never followed, no proxy from the environment is
used, and the whole exchange is bounded by one timeout. Connections are kept for the next push to the
same push service, whose answer is read (up to 64 KiB) for that. What the push service answered becomes an
`Outcome`; nothing here raises for a push service's behaviour.
"""

import asyncio
import contextlib
import email.utils
import enum
import json
import ssl
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import http_ece
import httpx
from cryptography.hazmat.primitives.asymmetric import ec

from pheby.push.endpoints import EndpointPolicy, EndpointRefused, Target
from pheby.push.notices import Notice
from pheby.push.subscriptions import StoredSubscription
from pheby.push.vapid import VapidIdentity

ANSWER_MAX = 64 * 1024  # of a push service's answer body, read only so its connection is kept
ANSWER_SECONDS = 2.0  # how long that read may take


class Result(enum.Enum):
    DELIVERED = "delivered"
    GONE = "gone"  # 404 / 410: the subscription no longer exists
    RETRY = "retry"  # 429, 5xx, a timeout or a broken connection
    FAILED = "failed"  # any other answer (a redirect included): not tried again
    REFUSED = "refused"  # the endpoint may not be called now: no request was sent


@dataclass(frozen=True)
class Outcome:
    result: Result
    retry_after: float | None = None  # seconds the push service asked for, with RETRY


def encrypt(payload: bytes, subscription: StoredSubscription) -> bytes:
    """The aes128gcm body for this subscription's keys, from a fresh sender key."""
    body: bytes = http_ece.encrypt(
        payload,
        private_key=ec.generate_private_key(ec.SECP256R1()),
        dh=subscription.p256dh,
        auth_secret=subscription.auth,
        version="aes128gcm",
    )
    return body


def encode_payload(notice: Notice) -> bytes:
    return json.dumps(notice.payload, ensure_ascii=False, separators=(",", ":")).encode()


class PushSender:
    def __init__(
        self,
        identity: VapidIdentity,
        policy: EndpointPolicy,
        *,
        timeout: float,
        transport: httpx.AsyncBaseTransport | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._identity = identity
        self._policy = policy
        self._client = httpx.AsyncClient(
            timeout=timeout,
            follow_redirects=False,
            trust_env=False,  # an environment proxy must not carry requests to a client's URL
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
            transport=transport,
            verify=True if tls is None else tls,  # the process's one context, from the composition root
        )

    async def send(self, notice: Notice, subscription: StoredSubscription) -> Outcome:
        await asyncio.sleep(0)  # one encryption a turn of the loop: a notice to 20 devices never holds it up
        try:
            target = await self._policy.target(subscription.endpoint)
        except EndpointRefused:
            return Outcome(Result.REFUSED)
        body = encrypt(encode_payload(notice), subscription)
        headers = {
            "Authorization": self._identity.authorization(subscription.endpoint),
            "Content-Encoding": "aes128gcm",
            "Content-Type": "application/octet-stream",
            "TTL": str(notice.ttl),
            "Urgency": notice.urgency,
            "Topic": notice.topic,
        }
        url, extensions = _pinned(target)
        if extensions:
            headers["Host"] = urlsplit(target.endpoint).netloc
        try:
            async with self._client.stream("POST", url, content=body, headers=headers, extensions=extensions) as answer:
                outcome = _outcome(answer)  # the status decides; a body that never ends changes nothing
                with contextlib.suppress(httpx.HTTPError, TimeoutError):
                    async with asyncio.timeout(ANSWER_SECONDS):
                        await _read_bounded(answer)
                return outcome
        except (httpx.TimeoutException, httpx.TransportError):
            return Outcome(Result.RETRY)

    async def aclose(self) -> None:
        await self._client.aclose()


async def _read_bounded(answer: httpx.Response) -> None:
    """Read what the push service answered, up to `ANSWER_MAX` bytes, so its connection can serve the next
    push; past that the connection is dropped instead (the body is of no use, and a service may be hostile)."""
    read = 0
    async for chunk in answer.aiter_raw():
        read += len(chunk)
        if read > ANSWER_MAX:
            return


def _pinned(target: Target) -> tuple[str, dict[str, Any]]:
    """The URL to request, naming the checked address instead of the host, and the TLS server name."""
    if target.allowed_host:
        return target.endpoint, {}
    parts = urlsplit(target.endpoint)
    address = f"[{target.address}]" if ":" in target.address else target.address
    netloc = address if parts.port is None else f"{address}:{parts.port}"
    return parts._replace(netloc=netloc).geturl(), {"sni_hostname": target.host}


def _outcome(response: httpx.Response) -> Outcome:
    status = response.status_code
    if 200 <= status < 300:
        return Outcome(Result.DELIVERED)
    if status in (404, 410):
        return Outcome(Result.GONE)
    if status == 429 or status >= 500:
        return Outcome(Result.RETRY, _retry_after(response.headers.get("Retry-After")))
    return Outcome(Result.FAILED)


def _retry_after(value: str | None) -> float | None:
    """`Retry-After` as seconds from now: a number of seconds, or an HTTP date."""
    if not value:
        return None
    if value.strip().isdigit():
        return float(value.strip())
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())

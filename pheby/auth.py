"""Who is calling: the owner secret, an account token, or a Hope session cookie.

One `Authenticator` serves every surface: `/api/*` (bearer or cookie, with the Origin rule for
cookie mutations), `/attachments` (bearer, ApiKey, X-Pheby-Secret or the cookie, with the same Origin
rule for uploads) and the WebSocket (a hello's secret or token, or the cookie its handshake carried;
a browser's handshake from another origin is refused before any of that).

A stored token's `last_used_at` is written when it authenticates something, at most once a
`LAST_USED_EVERY_SECONDS` per token, so reads don't each become a write.
"""

import hmac
import ipaddress
import re
import time
from typing import Any, Literal

import msgspec
from litestar.connection import ASGIConnection

from pheby import metrics
from pheby.errors import Forbidden, RateLimited, Unauthorized
from pheby.settings import Settings
from pheby.store.accounts import Account, Accounts, ResolvedToken
from pheby.store.lockout import BearerFailures

SESSION_COOKIE = "hope_session"
# Over https the cookie is a `__Host-` one: Secure, Path=/, no Domain, so a sibling host can't set or shadow it.
SECURE_SESSION_COOKIE = "__Host-hope_session"
MUTATING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# What `Accounts.issue_token` hands out: anything else is no token, so it is refused without a query.
TOKEN_SHAPE = re.compile(r"phb_[A-Za-z0-9_-]{43}")
LAST_USED_EVERY_SECONDS = 60.0


class Principal(msgspec.Struct, frozen=True, kw_only=True):
    """An authenticated caller: the account and the credential it used.

    `token_id` (and `expires_at`, for sessions) are set when a stored token (not the secret) was
    used, so what was authenticated with it can be found again when the token is revoked.
    """

    account: Account
    via: Literal["secret", "token", "cookie"]
    token_id: str | None = None
    expires_at: float | None = None
    # When the credential was checked (wall clock, before the check read anything): a revocation at or
    # after it ends what this principal opened; a credential issued after a revocation is not touched.
    judged_at: float = 0.0


class Authenticator:
    def __init__(
        self, settings: Settings, accounts: Accounts, owner: Account, bearer_failures: BearerFailures | None = None
    ) -> None:
        self._secret = settings.secret.encode()
        self.bearer_failures = bearer_failures or BearerFailures()
        self._allowed_origins = frozenset(settings.allowed_origins)
        self._trusted_proxies = tuple(ipaddress.ip_network(p, strict=False) for p in settings.trusted_proxies)
        self._public_url = settings.public_url
        self._accounts = accounts
        self._owner = owner

    async def from_secret(self, secret: str) -> Principal | None:
        """`PHEBY_SECRET` → the owner; an account's live token → that account; else None."""
        if not secret:
            return None
        judged_at = time.time()
        if hmac.compare_digest(secret.encode(), self._secret):
            owner = await self._accounts.get(self._owner.id)
            return None if owner.disabled else Principal(account=owner, via="secret", judged_at=judged_at)
        if not TOKEN_SHAPE.fullmatch(secret):
            return None
        resolved = await self._accounts.resolve_token(secret)
        if resolved is None:
            return None
        return await self._principal(resolved, "token", judged_at)

    async def for_session_exchange(self, secret: str) -> Principal | None:
        """What `POST /api/auth/session` trades for a session: `PHEBY_SECRET` or an account's API token.

        A session token is no such credential: a stolen cookie can't be stretched into fresh sessions.
        """
        if not secret or hmac.compare_digest(secret.encode(), self._secret):
            return await self.from_secret(secret)
        judged_at = time.time()
        resolved = await self._accounts.resolve_token(secret)
        if resolved is None or resolved.kind != "api":
            return None
        return await self._principal(resolved, "token", judged_at)

    async def from_session_cookie(self, connection: ASGIConnection[Any, Any, Any, Any]) -> Principal | None:
        """The live session the connection's cookie names (its name follows the scheme), else None."""
        cookie = connection.cookies.get(session_cookie_name(https=self.is_https(connection)))
        if not cookie:
            return None
        judged_at = time.time()
        resolved = await self._accounts.resolve_token(cookie)
        if resolved is None or resolved.kind != "session":
            return None
        return await self._principal(resolved, "cookie", judged_at)

    def origin_allowed(self, connection: ASGIConnection[Any, Any, Any, Any]) -> bool:
        """Whether the connection's `Origin` may act with the cookie: the server's own origin (Pheby Web)
        or one of `PHEBY_ALLOWED_ORIGINS` (Hope's web client); an absent Origin: False."""
        origin = connection.headers.get("origin")
        if origin is None:
            return False
        return origin in (self._allowed_origins | {self.own_origin(connection)})

    async def _principal(self, resolved: ResolvedToken, via: Literal["token", "cookie"], judged_at: float) -> Principal:
        if resolved.last_used_at is None or judged_at - resolved.last_used_at >= LAST_USED_EVERY_SECONDS:
            await self._accounts.mark_used(resolved.token_id)
        return Principal(
            account=resolved.account,
            via=via,
            token_id=resolved.token_id,
            expires_at=resolved.expires_at,
            judged_at=judged_at,
        )

    async def for_api(self, connection: ASGIConnection[Any, Any, Any, Any]) -> Principal:
        """The `/api/*` rule: bearer (secret or token) or the session cookie; cookie mutations need Origin."""
        bearer = _bearer(connection.headers.get("authorization", ""))
        if bearer is not None:
            return await self._from_bearer(connection, bearer)
        return await self._by_cookie(connection)

    async def for_attachments(self, connection: ASGIConnection[Any, Any, Any, Any]) -> Principal:
        """The `/attachments` rule: `Bearer`, `ApiKey` or `X-Pheby-Secret` (secret or account token),
        else the session cookie, under the `/api` cookie rule (an upload needs an allowed Origin)."""
        header = connection.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        secret = value.strip() if scheme.lower() in ("bearer", "apikey") else ""
        secret = secret or connection.headers.get("x-pheby-secret", "").strip()
        if not secret:
            return await self._by_cookie(connection)
        return await self._from_bearer(connection, secret)

    async def _from_bearer(self, connection: ASGIConnection[Any, Any, Any, Any], secret: str) -> Principal:
        """A presented secret or token, counted per source address when wrong (`BearerFailures`).

        A locked-out address is refused before its credential is looked at, the right one included (else
        a guess that hit would still get in), unless that credential already worked from there. Anything
        that is neither the owner secret nor shaped like a token is counted before any await, so
        concurrent guesses each see the ones before them.
        """
        address = self.client_address(connection)
        retry_after = self.bearer_failures.retry_after(address, secret)
        if retry_after is not None:
            metrics.LOCKOUTS.labels("bearer").inc()
            raise RateLimited("Too many wrong credentials from this address; try again later", retry_after=retry_after)
        is_owner_secret = hmac.compare_digest(secret.encode(), self._secret)
        if not is_owner_secret and not TOKEN_SHAPE.fullmatch(secret):
            self.bearer_failures.record_failure(address)
            raise Unauthorized("Invalid or expired credentials")
        principal = await self.from_secret(secret)
        if principal is None:
            self.bearer_failures.record_failure(address)
            raise Unauthorized("Invalid or expired credentials")
        self.bearer_failures.vouch(address, secret)
        return principal

    async def _by_cookie(self, connection: ASGIConnection[Any, Any, Any, Any]) -> Principal:
        if not connection.cookies.get(session_cookie_name(https=self.is_https(connection))):
            raise Unauthorized()
        principal = await self.from_session_cookie(connection)
        if principal is None:
            raise Unauthorized("Invalid or expired session")
        if connection.scope.get("method") in MUTATING_METHODS:
            self._check_origin(connection)
        return principal

    def client_address(self, connection: ASGIConnection[Any, Any, Any, Any]) -> str:
        """The peer address, or X-Forwarded-For's nearest untrusted hop when the peer is a trusted proxy."""
        peer = connection.client.host if connection.client else "unknown"
        if not self._is_trusted(peer):
            return peer
        hops = [h.strip() for h in connection.headers.get("x-forwarded-for", "").split(",") if h.strip()]
        for hop in reversed(hops):
            if _is_ip(hop) and not self._is_trusted(hop):
                return hop
        return peer

    def is_https(self, connection: ASGIConnection[Any, Any, Any, Any]) -> bool:
        """Whether clients reach the server over https: `PHEBY_PUBLIC_URL` says so, else the connection.

        Behind a TLS proxy the connection itself is plain http, so a trusted proxy's
        `X-Forwarded-Proto` (its first value: the scheme the client used) is believed; an untrusted
        peer's is ignored.
        """
        if self._public_url:
            return self._public_url.startswith("https://")
        if connection.url.scheme in ("https", "wss"):
            return True
        peer = connection.client.host if connection.client else ""
        if not self._is_trusted(peer):
            return False
        forwarded = connection.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
        return forwarded in ("https", "wss")

    def own_origin(self, connection: ASGIConnection[Any, Any, Any, Any]) -> str:
        """The server's own origin: `PHEBY_PUBLIC_URL` when set, else the scheme clients use and the Host."""
        if self._public_url:
            return self._public_url
        host = connection.headers.get("host", "")
        return f"{'https' if self.is_https(connection) else 'http'}://{host}"

    def _is_trusted(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self._trusted_proxies)

    def _check_origin(self, connection: ASGIConnection[Any, Any, Any, Any]) -> None:
        if connection.headers.get("origin") is None:
            raise Forbidden("Cookie-authenticated changes need an Origin header")
        if not self.origin_allowed(connection):
            raise Forbidden("Origin not allowed")


def session_cookie_name(*, https: bool) -> str:
    """The session cookie's name: `__Host-hope_session` over https, where such a cookie can be set."""
    return SECURE_SESSION_COOKIE if https else SESSION_COOKIE


def _bearer(header: str) -> str | None:
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return value.strip()


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True

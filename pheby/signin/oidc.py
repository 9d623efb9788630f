"""OpenID Connect sign-in: the authorization code flow with PKCE, for people who run an identity provider.

`OidcSignIn.begin` records a pending sign-in (state digest, nonce, PKCE verifier) and gives the
provider's authorization URL; `OidcSignIn.finish` takes that pending sign-in back (once), exchanges the
code at the token endpoint and validates the ID token (`validate_id_token`: signature against the
provider's JWKS, issuer, audience/azp, expiry and iat, nonce); `account_for` maps the identity
(issuer, subject: never the e-mail address) to a linked account, or makes one when the operator lets
it. Authlib builds the requests and checks the ID token's claims; joserfc, Authlib's JOSE layer,
checks the signature. Every refusal is an `OidcFailure` with a short code the page can explain.
"""

import asyncio
import hashlib
import logging
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import httpx
import msgspec
from authlib.common.security import generate_token
from authlib.oauth2.auth import ClientAuth
from authlib.oauth2.rfc6749.parameters import prepare_grant_uri, prepare_token_request
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from authlib.oidc.core import CodeIDToken
from joserfc import jwt
from joserfc.errors import BadSignatureError, InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet
from joserfc.jws import JWSRegistry

from hermes_client.tls import shared_tls_context
from pheby.errors import Conflict
from pheby.settings import Settings
from pheby.store.accounts import Account, Accounts
from pheby.store.lockout import RecentCounts
from pheby.store.oidc import OidcStore

log = logging.getLogger("pheby.signin.oidc")

FailureCode = Literal[
    "disabled",  # OIDC is not configured
    "state",  # the state is unknown, used already, expired, or not this browser's
    "denied",  # the person (or the provider) declined
    "provider",  # the provider could not be reached or answered nonsense
    "token",  # the ID token failed validation
    "not_allowed",  # the identity carries none of the allowed claims
    "unlinked",  # no account is linked to the identity (and none may be made)
    "account_disabled",  # the linked account is disabled
    "busy",  # too many sign-ins under way at once
]

PENDING_TTL_SECONDS = 600  # a person has ten minutes at the provider
MAX_PENDING = 10_000  # sign-ins under way at once (anyone may begin one: their rows are bounded)
STARTS_PER_SOURCE = 20  # sign-ins one address may begin a minute, so one can't fill the table
HTTP_TIMEOUT_SECONDS = 10.0
MAX_DOCUMENT_BYTES = 256 * 1024  # discovery, JWKS and token responses are a few KiB
METADATA_TTL_SECONDS = 3600
CLOCK_LEEWAY_SECONDS = 60
SCOPES = "openid profile email"
# Asymmetric signatures only: an HMAC ID token would be signed with the client secret, "none" with nothing.
SIGNING_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
EMAIL_DOMAIN_CLAIM = "email_domain"  # derived: the domain of a verified `email`
ACCOUNT_NAME_MAX = 32
_NAME_CHARS = re.compile(r"[^a-z0-9._-]+")

T = TypeVar("T")


class OidcFailure(Exception):
    """A refused sign-in: `code` for the page, `detail` for the log (never a token or a code)."""

    def __init__(self, code: FailureCode, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code: FailureCode = code
        self.detail = detail


class SignatureFailure(OidcFailure):
    """The ID token's signature is not one of the keys at hand: a forgery, or keys the provider has rotated
    since they were fetched (the caller fetches them again, once)."""

    def __init__(self, detail: str) -> None:
        super().__init__("token", detail)


class ProviderMetadata(msgspec.Struct, frozen=True):
    """The fields of `<issuer>/.well-known/openid-configuration` this client uses."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    id_token_signing_alg_values_supported: list[str] = msgspec.field(default_factory=lambda: ["RS256"])


class TokenResponse(msgspec.Struct, frozen=True):
    id_token: str | None = None
    access_token: str | None = None
    error: str | None = None


class AllowRule(msgspec.Struct, frozen=True):
    claim: str
    value: str


def parse_allowed_claims(entries: Sequence[str]) -> tuple[AllowRule, ...]:
    """`claim=value` entries (PHEBY_OIDC_ALLOWED_CLAIMS); raises ValueError for one without a claim or value."""
    rules = []
    for entry in entries:
        claim, sep, value = entry.partition("=")
        if not sep or not claim.strip() or not value.strip():
            raise ValueError(f"PHEBY_OIDC_ALLOWED_CLAIMS: {entry!r} is not claim=value")
        rules.append(AllowRule(claim.strip(), value.strip()))
    return tuple(rules)


def claim_values(claims: Mapping[str, Any], claim: str) -> list[str]:
    """The values a claim offers to the allow-list: a string, each string of a list (`groups`), a boolean
    as `true`/`false`; `email_domain` is the domain of `email`, and only when `email_verified` is true."""
    if claim == EMAIL_DOMAIN_CLAIM:
        email = claims.get("email")
        if claims.get("email_verified") is True and isinstance(email, str) and "@" in email:
            return [email.rsplit("@", 1)[1].lower()]
        return []
    value = claims.get(claim)
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str)]
    return []


def is_allowed(claims: Mapping[str, Any], rules: Sequence[AllowRule]) -> bool:
    """No rules: anyone the provider vouches for. Else the identity must match at least one rule."""
    return not rules or any(rule.value in claim_values(claims, rule.claim) for rule in rules)


def validate_id_token(
    id_token: str,
    keys: KeySet,
    *,
    issuer: str,
    client_id: str,
    nonce: str,
    algorithms: Sequence[str] = ("RS256",),
    access_token: str | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """The ID token's claims once its signature (by one of `keys`) and its claims hold: `iss` is `issuer`,
    `aud` holds `client_id` (and `azp` is it when there are several audiences), `exp`/`iat` are
    present and `exp` not past, `nonce` is the one sent. Raises `SignatureFailure` when no key of `keys`
    signed it (the caller may fetch the keys again, once), `OidcFailure("token")` for anything else."""
    allowed = [alg for alg in algorithms if alg in SIGNING_ALGORITHMS] or ["RS256"]
    try:
        token = jwt.decode(id_token, keys, registry=JWSRegistry(algorithms=allowed, strict_check_header=False))
    except (InvalidKeyIdError, BadSignatureError) as exc:
        raise SignatureFailure(f"ID token not signed by the provider's keys ({type(exc).__name__})") from None
    except (JoseError, ValueError) as exc:
        raise OidcFailure("token", f"ID token not valid ({type(exc).__name__})") from None
    claims = CodeIDToken(
        token.claims,
        token.header,
        {"iss": {"essential": True, "value": issuer}, "aud": {"essential": True, "value": client_id}},
        {"nonce": nonce, "client_id": client_id, "access_token": access_token},
    )
    at = int(time.time() if now is None else now)
    try:
        claims.validate(now=at, leeway=CLOCK_LEEWAY_SECONDS)
    except JoseError as exc:
        raise OidcFailure("token", f"ID token refused ({type(exc).__name__}: {exc.error})") from None
    if not isinstance(claims.get("sub"), str) or not claims["sub"]:
        raise OidcFailure("token", "ID token without a subject")
    return dict(claims)


def account_name_candidates(claims: Mapping[str, Any]) -> list[str]:
    """Free-name candidates for an account made at first sign-in: `preferred_username` reduced to
    lowercase letters, digits, `.`, `_` and `-` (else `sso-` and a digest of the subject), then numbered."""
    wanted = claims.get("preferred_username")
    base = _NAME_CHARS.sub("", wanted.lower())[:ACCOUNT_NAME_MAX].strip("._-") if isinstance(wanted, str) else ""
    if not base:
        base = "sso-" + hashlib.sha256(str(claims.get("sub", "")).encode()).hexdigest()[:10]
    return [base, *(f"{base}-{n}" for n in range(2, 10)), f"{base}-{secrets.token_hex(4)}"]


class OidcSignIn:
    """The server's OIDC client: provider metadata and JWKS (cached), pending sign-ins, identity → account."""

    def __init__(
        self,
        settings: Settings,
        store: OidcStore,
        accounts: Accounts,
        *,
        clock: Callable[[], float] = time.time,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self._max_pending = max_pending
        self._settings = settings
        self._store = store
        self._accounts = accounts
        self._clock = clock
        self._rules = parse_allowed_claims(settings.oidc_allowed_claims)
        self._metadata: ProviderMetadata | None = None
        self._metadata_at = 0.0
        self._keys: KeySet | None = None
        self._lock = asyncio.Lock()
        self._starts = RecentCounts(limit=STARTS_PER_SOURCE, window=60.0)

    @property
    def enabled(self) -> bool:
        s = self._settings
        return bool(s.oidc_issuer and s.oidc_client_id and s.oidc_client_secret)

    @property
    def name(self) -> str:
        return self._settings.oidc_name

    @property
    def issuer(self) -> str:
        return self._settings.oidc_issuer.rstrip("/")

    async def begin(self, redirect_uri: str, source: str) -> tuple[str, str]:
        """A new pending sign-in from address `source`: (the provider's authorization URL to send the browser
        to, its state)."""
        self._require_enabled()
        if self._starts.retry_after(source) is not None:
            raise OidcFailure("busy", f"{STARTS_PER_SOURCE} sign-ins a minute from one address already")
        self._starts.record(source)
        metadata = await self.metadata()
        state, nonce, verifier = generate_token(43), generate_token(43), generate_token(64)
        if not await self._store.begin(state, nonce, verifier, PENDING_TTL_SECONDS, limit=self._max_pending):
            raise OidcFailure("busy", f"{self._max_pending} sign-ins are under way already")
        url: str = prepare_grant_uri(
            metadata.authorization_endpoint,
            client_id=self._settings.oidc_client_id,
            response_type="code",
            redirect_uri=redirect_uri,
            scope=SCOPES,
            state=state,
            nonce=nonce,
            code_challenge=create_s256_code_challenge(verifier),
            code_challenge_method="S256",
        )
        return url, state

    async def finish(self, *, state: str, code: str, redirect_uri: str) -> dict[str, Any]:
        """The validated, allowed ID token claims of the sign-in `state` began (which is used up)."""
        self._require_enabled()
        pending = await self._store.take(state)
        if pending is None:
            raise OidcFailure("state", "state unknown, used already or expired")
        metadata = await self.metadata()
        tokens = await self._exchange(metadata, code, pending.code_verifier, redirect_uri)
        if not tokens.id_token:
            raise OidcFailure("provider", "the token endpoint gave no ID token")
        algorithms = metadata.id_token_signing_alg_values_supported
        check: dict[str, Any] = {
            "issuer": self.issuer,
            "client_id": self._settings.oidc_client_id,
            "nonce": pending.nonce,
            "algorithms": algorithms,
            "access_token": tokens.access_token,
            "now": self._clock(),
        }
        try:
            claims = validate_id_token(tokens.id_token, await self.keys(), **check)
        except SignatureFailure:  # the provider may have rotated its keys: fetch them again, once
            claims = validate_id_token(tokens.id_token, await self.keys(refresh=True), **check)
        if not is_allowed(claims, self._rules):
            raise OidcFailure("not_allowed", "the identity carries none of PHEBY_OIDC_ALLOWED_CLAIMS")
        return claims

    async def forget(self, state: str) -> None:
        """Use up a pending sign-in the provider answered with an error."""
        await self._store.take(state)

    async def account_for(self, claims: Mapping[str, Any]) -> Account:
        """The account linked to the identity (issuer, subject); one made for it at first sign-in when
        PHEBY_OIDC_CREATE_ACCOUNTS is on. Never found by e-mail address."""
        subject = str(claims["sub"])
        account_id = await self._store.account_id_for(self.issuer, subject)
        if account_id is None:
            if not self._settings.oidc_create_accounts:
                raise OidcFailure("unlinked", "no account is linked to this identity")
            account_id = await self._create_linked(subject, claims)
        account = await self._accounts.get(account_id)
        if account.disabled:
            raise OidcFailure("account_disabled", f"account {account.name!r} is disabled")
        return account

    async def link(self, account_name: str, subject: str, issuer: str | None = None) -> Account:
        """Link an identity of the provider to an account (the CLI's `account link-oidc`)."""
        account = await self._accounts.get_by_name(account_name)
        await self._store.link((issuer or self.issuer).rstrip("/"), subject, account.id)
        return account

    async def _create_linked(self, subject: str, claims: Mapping[str, Any]) -> str:
        for name in account_name_candidates(claims):
            try:
                account = await self._accounts.create(name)
            except Conflict:
                continue
            # Two first sign-ins of one identity racing: the first link stays, the other account goes unused.
            linked = await self._store.link(self.issuer, subject, account.id, replace=False)
            log.info("OIDC: account %r made for a new identity", account.name)
            return linked
        raise OidcFailure("unlinked", "no free account name for this identity")

    def _require_enabled(self) -> None:
        if not self.enabled:
            raise OidcFailure("disabled", "OIDC sign-in is not configured")

    async def metadata(self) -> ProviderMetadata:
        """The provider's discovery document (cached an hour); its issuer must be the configured one."""
        async with self._lock:
            if self._metadata is not None and self._clock() - self._metadata_at < METADATA_TTL_SECONDS:
                return self._metadata
            url = f"{self.issuer}/.well-known/openid-configuration"
            metadata = await self._get_json(url, ProviderMetadata)
            if metadata.issuer.rstrip("/") != self.issuer:
                raise OidcFailure("provider", "the discovery document names another issuer")
            self._metadata, self._metadata_at = metadata, self._clock()
            return metadata

    async def keys(self, *, refresh: bool = False) -> KeySet:
        """The provider's signing keys (cached until a token names a key they lack)."""
        metadata = await self.metadata()
        async with self._lock:
            if self._keys is None or refresh:
                jwks = await self._get_json(metadata.jwks_uri, dict[str, Any])
                try:
                    self._keys = KeySet.import_key_set(jwks)  # type: ignore[arg-type]
                except (JoseError, ValueError, KeyError, TypeError) as exc:
                    raise OidcFailure("provider", f"the provider's JWKS is not valid ({type(exc).__name__})") from None
            return self._keys

    async def _exchange(self, metadata: ProviderMetadata, code: str, verifier: str, redirect_uri: str) -> TokenResponse:
        body: str = prepare_token_request(
            "authorization_code", code=code, redirect_uri=redirect_uri, code_verifier=verifier
        )
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}
        auth = ClientAuth(self._settings.oidc_client_id, self._settings.oidc_client_secret, "client_secret_basic")
        uri, headers, body = auth.prepare("POST", metadata.token_endpoint, headers, body)
        tokens = await self._fetch_json("POST", uri, TokenResponse, headers=headers, content=body.encode())
        if tokens.error:
            raise OidcFailure("provider", f"the token endpoint refused the code ({tokens.error[:64]!r})")
        return tokens

    async def _get_json(self, url: str, into: type[T]) -> T:
        return await self._fetch_json("GET", url, into, headers={"Accept": "application/json"})

    async def _fetch_json(
        self, method: str, url: str, into: type[T], *, headers: Mapping[str, str], content: bytes | None = None
    ) -> T:
        """One bounded request to the provider (timeout, no redirects, at most MAX_DOCUMENT_BYTES)."""
        if not url.startswith(("https://", "http://")):
            raise OidcFailure("provider", "the provider gave an endpoint that is not http(s)")
        body = bytearray()
        try:
            async with (
                httpx.AsyncClient(
                    timeout=HTTP_TIMEOUT_SECONDS, follow_redirects=False, verify=shared_tls_context()
                ) as client,
                client.stream(method, url, headers=dict(headers), content=content) as response,
            ):
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_DOCUMENT_BYTES:
                        raise OidcFailure("provider", f"{_endpoint(url)} answered more than {MAX_DOCUMENT_BYTES} bytes")
                status = response.status_code
        except httpx.HTTPError as exc:
            raise OidcFailure("provider", f"{_endpoint(url)} unreachable ({type(exc).__name__})") from None
        # A token endpoint's refusal is 400 with a JSON `error`: decoded, so the log can say which.
        if status != 200 and not (status == 400 and into is TokenResponse):
            raise OidcFailure("provider", f"{_endpoint(url)} answered {status}")
        try:
            return msgspec.json.decode(bytes(body), type=into)
        except msgspec.DecodeError as exc:
            raise OidcFailure("provider", f"{_endpoint(url)} answered a document not understood ({exc})") from None


def _endpoint(url: str) -> str:
    """A URL for the log: without its query (which may carry a code)."""
    return url.split("?", 1)[0][:200]

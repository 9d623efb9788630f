"""Starting a session: the token, its row (what signed it in, from which device) and its cookie.

Every sign-in route ends here, so a session is made one way whatever proved who the person is.
The JSON still carries the token for bearer clients (Hope); Pheby Web keeps only the cookie,
which its JavaScript can't read.
"""

from typing import Any, Literal

import msgspec
from litestar import Request, Response
from litestar.datastructures import Cookie

from pheby.auth import session_cookie_name
from pheby.services import Services
from pheby.store.accounts import Account

SignInMethod = Literal["secret", "password", "totp", "recovery_code", "passkey", "oidc"]
DEVICE_MAX_CHARS = 200


class SignedIn(msgspec.Struct, frozen=True):
    token: str
    expires_at: float


def browser_cookie(name: str, value: str, max_age: int, *, https: bool) -> Cookie:
    """A cookie no script reads, sent along on top-level navigations from other sites (SameSite=Lax) and on
    every request of this one: Secure over https, where `name` should carry the `__Host-` prefix."""
    return Cookie(key=name, value=value, max_age=max_age, httponly=True, samesite="lax", secure=https, path="/")


def session_cookie(token: str, max_age: int, *, https: bool) -> Cookie:
    """`__Host-hope_session` over https (Secure, no Domain, Path=/), `hope_session` over plain http."""
    return browser_cookie(session_cookie_name(https=https), token, max_age, https=https)


def ended_session_cookie(*, https: bool) -> Cookie:
    """The cookie's removal, named as it was set."""
    return session_cookie("", 0, https=https)


def device_of(request: Request[Any, Any, Any]) -> str:
    """What the session list shows for the device: its User-Agent, bounded, printable only."""
    agent = request.headers.get("user-agent", "")
    return "".join(c for c in agent if c.isprintable())[:DEVICE_MAX_CHARS]


class NewSession(msgspec.Struct, frozen=True):
    """A session just issued: what the JSON says, and the cookie that carries it (for a JSON answer or a
    redirect alike)."""

    signed_in: SignedIn
    cookie: Cookie


REPLACED = "Signed in again on this device"


async def issue_session(
    services: Services, request: Request[Any, Any, Any], account: Account, method: SignInMethod
) -> NewSession:
    """A new session for `account`, signed in by `method`: its token and its cookie.

    The session of the cookie the request came with, if one still lives, ends (its sockets close): a
    sign-in replaces what the browser held, so no session is left behind unseen, and one planted in the
    browser beforehand is never carried over.
    """
    replaced = await services.authenticator.from_session_cookie(request)
    if replaced is not None and replaced.token_id is not None:
        await services.accounts.revoke_token(replaced.token_id)
        services.revocations.close_token(replaced.token_id, REPLACED)
    ttl = services.settings.session_ttl_seconds
    issued = await services.accounts.issue_token(account.id, "session", ttl, device=device_of(request), method=method)
    assert issued.expires_at is not None  # sessions always expire
    https = services.authenticator.is_https(request)
    signed_in = SignedIn(token=issued.token, expires_at=issued.expires_at)
    return NewSession(signed_in, session_cookie(issued.token, ttl, https=https))


async def start_session(
    services: Services, request: Request[Any, Any, Any], account: Account, method: SignInMethod
) -> Response[SignedIn]:
    """A new session for `account`, signed in by `method`: the token in the JSON and in the cookie."""
    session = await issue_session(services, request, account, method)
    return Response(session.signed_in, cookies=[session.cookie])

"""Recent authentication: what adding a sign-in method asks of a session, so a stolen one can't plant its own.

A session qualifies for `RECENT_SECONDS` after its holder signed in or re-authenticated
(`auth_tokens.authenticated_at`); the owner secret as bearer always does (it is proven on every call).
Otherwise the client first calls `POST /api/auth/reauthenticate` with the password (or the owner secret).
"""

import hmac
from typing import Any

import msgspec
from litestar import Request

from pheby.auth import Principal
from pheby.errors import BadRequest, Forbidden
from pheby.services import Services
from pheby.signin.totp import use_code
from pheby.store.reauthentication import SessionAuthentication

RECENT_SECONDS = 300.0


class ReauthenticationRequired(Forbidden):
    code = "reauthentication_required"
    default_message = "Confirm who you are first: enter your password (or the owner secret) again"


class ReauthenticationRefused(Forbidden):
    code = "reauthentication_refused"
    default_message = "That password (or secret) was not accepted"


class Reauthenticated(msgspec.Struct, frozen=True):
    authenticated_at: float | None


async def require_recent_authentication(services: Services, principal: Principal) -> None:
    """Pass if the caller proved who they are within `RECENT_SECONDS`, else `ReauthenticationRequired`."""
    if principal.via == "secret":
        return
    token_id = principal.token_id
    if token_id is not None and await SessionAuthentication(services.db).authenticated_within(token_id, RECENT_SECONDS):
        return
    raise ReauthenticationRequired()


async def _second_factor(services: Services, address: str, account_id: str, code: str | None) -> None:
    """A code of the account's authenticator (or a recovery code), used up, under the code limits."""
    if not code:
        raise ReauthenticationRefused("Two-step sign-in is on: give a code from your authenticator too")
    attempts = services.code_attempts
    async with attempts.attempt(address, account_id):
        if await use_code(services, account_id, code) is None:
            await attempts.record_failure(address, account_id)
            raise ReauthenticationRefused("That code is wrong, or was used already")


async def reauthenticate(
    services: Services,
    request: Request[Any, Any, Any],
    principal: Principal,
    *,
    password: str | None,
    secret: str | None,
    code: str | None = None,
) -> Reauthenticated:
    """Check the caller's password (or, for the owner, the secret), limited like a login; the session is
    then authenticated now. A wrong one counts against the address and the account's name. With two-step
    sign-in on, a password needs a code too (`pheby.signin.totp`), as at sign-in: else a stolen session and
    a phished password could plant a passkey, which signs in without one."""
    if (password is None) == (secret is None):
        raise BadRequest("Give either the password or the secret")
    account = principal.account
    guard = services.login_guard
    address = services.authenticator.client_address(request)
    async with guard.attempt(address, account.name):
        if password is not None:
            proven = await services.accounts.verify_password(account.name, password, hashing=guard.hashing)
            ok = proven is not None and proven.id == account.id
        else:
            assert secret is not None
            expected = services.settings.secret.encode()
            ok = account.is_owner and hmac.compare_digest(secret.encode(), expected)
        if not ok:
            await guard.record_failure(address, account.name)
            raise ReauthenticationRefused()
    if password is not None and await services.second_factors.is_enabled(account.id):
        await _second_factor(services, address, account.id, code)
    if principal.token_id is None:  # the secret as bearer: nothing to mark, it proves itself each call
        return Reauthenticated(authenticated_at=None)
    sessions = SessionAuthentication(services.db)
    await sessions.mark_authenticated(principal.token_id)
    return Reauthenticated(authenticated_at=await sessions.authenticated_at(principal.token_id))

"""Password sign-in's second factor: an authenticator's TOTP code (RFC 6238, `pyotp`) or a recovery code.

A password that is right for an account with TOTP on (or for any account, with
`PHEBY_REQUIRE_SECOND_FACTOR`) starts no session: it gets a ticket, random, stored as a digest, bound
to the account, single-use and valid five minutes, which `POST /api/auth/login/totp` redeems with a
code. Every code check, there and on the Security page, is limited per address and per account
(`CodeAttempts`); a TOTP code is accepted once (its time step is used up), a recovery code too.
"""

import hmac
import secrets
from typing import Any, Literal

import msgspec
import pyotp
from litestar import Request, Response

from pheby.errors import Forbidden, Unauthorized
from pheby.services import Services
from pheby.signin.sessions import SignedIn, start_session
from pheby.store.accounts import Account

TICKET_TTL_SECONDS = 300
RECOVERY_CODE_COUNT = 10
CODE_MAX_CHARS = 64  # a 6-digit code or a recovery code, with spaces or dashes as people type them
ISSUER = "Pheby"  # the name authenticator apps show beside the account's
# Codes of the step before and after the current one pass too: the phone's clock may be a little off.
STEPS_EITHER_SIDE = 1

CodeMethod = Literal["totp", "recovery_code"]


class SecondFactorNeeded(msgspec.Struct, frozen=True):
    """A right password; the code is still due, with this ticket, at `POST /api/auth/login/totp`."""

    second_factor: Literal["totp"]
    ticket: str
    expires_at: float


def new_secret() -> str:
    """A new authenticator key: 160 random bits, base32 (RFC 4226's recommended length)."""
    return pyotp.random_base32()


def provisioning_uri(secret: str, account_name: str) -> str:
    """The `otpauth://totp/...` URI an authenticator app takes (as a link or a QR code)."""
    return pyotp.TOTP(secret).provisioning_uri(name=account_name, issuer_name=ISSUER)


def new_recovery_codes() -> list[str]:
    """Ten codes of 80 random bits each, written as four groups of five hex digits."""
    codes = []
    for _ in range(RECOVERY_CODE_COUNT):
        raw = secrets.token_hex(10)
        codes.append("-".join(raw[i : i + 5] for i in range(0, 20, 5)))
    return codes


def normalized(code: str) -> str:
    """The code without the spaces and dashes people type or paste, in lower case."""
    return "".join(c for c in code if c not in " -").lower()


def is_totp_code(code: str) -> bool:
    return len(code) == 6 and code.isascii() and code.isdigit()


def matching_step(secret: str, code: str, now: float, *, after: int | None = None) -> int | None:
    """The time step (around `now`, newer than `after`) whose code `code` is; None when none is."""
    totp = pyotp.TOTP(secret)
    current = totp.timecode(int(now))
    for step in range(current - STEPS_EITHER_SIDE, current + STEPS_EITHER_SIDE + 1):
        if after is not None and step <= after:
            continue
        if hmac.compare_digest(totp.generate_otp(step), code):
            return step
    return None


async def use_code(services: Services, account_id: str, code: str) -> CodeMethod | None:
    """Check and use up a code of the account's enabled second factor: how it was proved, or None.

    Call it inside a `CodeAttempts.attempt` turn; it records no failure itself.
    """
    store = services.second_factors
    state = await store.state(account_id)
    if state is None or not state.enabled:
        return None
    code = normalized(code)
    if is_totp_code(code):
        step = matching_step(state.secret, code, store.clock(), after=state.last_step)
        # The step is used up in one conditional write, so two requests can't both spend one code.
        return "totp" if step is not None and await store.accept_step(account_id, step) else None
    return "recovery_code" if await store.use_recovery_code(account_id, code) else None


async def second_step(services: Services, account: Account) -> Response[Any] | None:
    """After a right password: the 202 that asks for the code, or None when the password is enough.

    With `PHEBY_REQUIRE_SECOND_FACTOR` an account without TOTP can't sign in with a password at all.
    """
    if not await services.second_factors.is_enabled(account.id):
        if services.settings.require_second_factor:
            raise Forbidden(
                "This server asks for a second factor, and this account has none: sign in with a passkey, "
                "single sign-on or the owner secret, and set up an authenticator on the Security page"
            )
        return None
    ticket = secrets.token_urlsafe(32)
    expires_at = await services.second_factors.issue_ticket(account.id, ticket, TICKET_TTL_SECONDS)
    return Response(SecondFactorNeeded(second_factor="totp", ticket=ticket, expires_at=expires_at), status_code=202)


async def redeem_ticket(
    services: Services, request: Request[Any, Any, Any], ticket: str, code: str
) -> Response[SignedIn]:
    """The code step: a live ticket and a code of its account start a session; else 401 (or 429)."""
    store = services.second_factors
    address = services.authenticator.client_address(request)
    account_id = await store.ticket_account(ticket)
    if account_id is None:
        raise Unauthorized("This sign-in has expired; enter your password again")
    attempts = services.code_attempts
    async with attempts.attempt(address, account_id):
        method = await use_code(services, account_id, code)
        if method is None:
            await attempts.record_failure(address, account_id)
            raise Unauthorized("That code is wrong, or was used already")
        if not await store.use_ticket(ticket):  # the same ticket redeemed meanwhile
            raise Unauthorized("This sign-in has expired; enter your password again")
    account = await services.accounts.get(account_id)
    if account.disabled:
        raise Unauthorized("This sign-in has expired; enter your password again")
    return await start_session(services, request, account, method)

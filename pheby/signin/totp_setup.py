"""Turning an account's second factor on and off (`/api/auth/totp*`).

Setup makes a pending key; a code from the authenticator confirms it (so a key that never reached an
app can't lock anyone out) and turns it on with ten recovery codes, shown once. Turning it off needs a
code too, so a stolen session alone can't. Every code check here is limited like the sign-in's.
"""

from typing import Annotated

import msgspec

from pheby.errors import Conflict, Unprocessable
from pheby.services import Services
from pheby.signin.totp import (
    CODE_MAX_CHARS,
    is_totp_code,
    matching_step,
    new_recovery_codes,
    new_secret,
    normalized,
    provisioning_uri,
    use_code,
)
from pheby.store.accounts import Account


class TotpCode(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    code: Annotated[str, msgspec.Meta(max_length=CODE_MAX_CHARS)]


class TotpStatus(msgspec.Struct, frozen=True):
    enabled: bool
    pending: bool  # a key was set up and not yet confirmed by a code
    recovery_codes_left: int
    required: bool  # the server refuses a password alone (PHEBY_REQUIRE_SECOND_FACTOR)


class TotpKey(msgspec.Struct, frozen=True):
    key: str  # base32, for typing into an authenticator
    uri: str  # otpauth://totp/..., for an authenticator that takes a link or a QR code


class RecoveryCodes(msgspec.Struct, frozen=True):
    recovery_codes: list[str]  # shown this once: only their digests are kept


async def status(services: Services, account_id: str) -> TotpStatus:
    state = await services.second_factors.state(account_id)
    enabled = state is not None and state.enabled
    return TotpStatus(
        enabled=enabled,
        pending=state is not None and not state.enabled,
        recovery_codes_left=await services.second_factors.recovery_codes_left(account_id) if enabled else 0,
        required=services.settings.require_second_factor,
    )


async def set_up(services: Services, account: Account) -> TotpKey:
    """A new pending key (replacing an unconfirmed one); 409 while one is on."""
    secret = new_secret()
    if not await services.second_factors.set_pending(account.id, secret):
        raise Conflict("Two-step sign-in is on already; turn it off first to change the authenticator")
    return TotpKey(key=secret, uri=provisioning_uri(secret, account.name))


async def turn_on(services: Services, account_id: str, address: str, code: str) -> RecoveryCodes:
    """Confirm the pending key with a code of it (422 when wrong); its recovery codes, once."""
    store = services.second_factors
    state = await store.state(account_id)
    if state is None or state.enabled:
        raise Conflict("Set up an authenticator first" if state is None else "Two-step sign-in is on already")
    attempts = services.code_attempts
    async with attempts.attempt(address, account_id):
        code = normalized(code)
        step = matching_step(state.secret, code, store.clock()) if is_totp_code(code) else None
        if step is None:
            await attempts.record_failure(address, account_id)
            raise Unprocessable("That code is not the authenticator's current one; check the phone's clock")
        codes = new_recovery_codes()
        # Kept as typed back, without dashes: `use_code` normalizes what it is given the same way.
        if not await store.enable(account_id, state.secret, step, [normalized(c) for c in codes]):
            raise Conflict("The authenticator key was replaced meanwhile; set it up again")
    return RecoveryCodes(recovery_codes=codes)


async def turn_off(services: Services, account_id: str, address: str, code: str) -> TotpStatus:
    """Turn the second factor off with a current code or a recovery code (422 when wrong)."""
    if not await services.second_factors.is_enabled(account_id):
        raise Conflict("Two-step sign-in is off")
    attempts = services.code_attempts
    async with attempts.attempt(address, account_id):
        if await use_code(services, account_id, code) is None:
            await attempts.record_failure(address, account_id)
            raise Unprocessable("That code is wrong, or was used already")
        await services.second_factors.disable(account_id)
    return await status(services, account_id)

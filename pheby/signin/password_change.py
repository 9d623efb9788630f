"""A person changing their own password: the current one, the policy, the lockout, the other sessions.

Wrong current passwords count as failed logins do (`LoginGuard`: per address and per account name,
the same counters, so the change route adds no guesses to the login's), and are checked in the
login's hashing limiter. The new hash and the end of the account's other sessions are one
transaction; their sockets are closed at once. API tokens stay: the operator issued them.

An account without a password (made without one, like the owner) gets its first one from the
operator (`pheby account password`); the owner may also set one here with `current_password`
empty, signed in with `PHEBY_SECRET` (as bearer, or a session that secret started).
"""

from pheby.auth import Principal
from pheby.errors import Forbidden
from pheby.services import Services

ENDED_BY_CHANGE = "The password was changed; sign in again"
WRONG_CURRENT = "The current password is wrong"
FIRST_FROM_OPERATOR = (
    "This account has no password yet; the server's operator sets a first one with "
    "`pheby account password NAME --password-stdin`"
)


async def change_password(services: Services, caller: Principal, address: str, current: str, new: str) -> None:
    """Give the caller's account `new` if `current` is its password; end its other sessions.

    Raises `Forbidden` (wrong current password, counted), `Unprocessable` (the policy refuses `new`),
    `RateLimited` (locked out, or the hashing limiter full), `Conflict` (another change came first).
    """
    account, guard = caller.account, services.login_guard
    if (
        not current
        and not await services.accounts.has_password(account.id)
        and not await _may_set_first(services, caller)
    ):
        raise Forbidden(FIRST_FROM_OPERATOR)
    async with guard.attempt(address, account.name):
        changed = await services.accounts.set_password(
            account.id, new, current_password=current, hashing=guard.hashing, keep_session=caller.token_id
        )
        if changed is None:
            await guard.record_failure(address, account.name)
            raise Forbidden(WRONG_CURRENT)
    for token_id in changed.ended_sessions:
        services.revocations.close_token(token_id, ENDED_BY_CHANGE)


async def _may_set_first(services: Services, caller: Principal) -> bool:
    """Only the owner secret may give the owner account a first password without one to check."""
    if not caller.account.is_owner:
        return False
    if caller.via == "secret":
        return True
    return caller.token_id is not None and await services.accounts.sign_in_method(caller.token_id) == "secret"

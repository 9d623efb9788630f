"""GET /api/auth/passkeys — the caller's passkeys, and whether passkeys work where the page is."""

from typing import Any

import msgspec
from litestar import Request, get
from litestar.di import NamedDependency

from pheby.auth import Principal
from pheby.services import Services
from pheby.signin.relying_party import PasskeysUnavailable, relying_party
from pheby.store.passkeys import Passkey


class PasskeyInfo(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    transports: tuple[str, ...]
    created_at: float
    last_used_at: float | None

    @classmethod
    def of(cls, passkey: Passkey) -> "PasskeyInfo":
        return cls(
            id=passkey.id,
            name=passkey.name,
            transports=passkey.transports,
            created_at=passkey.created_at,
            last_used_at=passkey.last_used_at,
        )


class PasskeyList(msgspec.Struct, frozen=True, kw_only=True):
    passkeys: list[PasskeyInfo]
    # The one origin passkeys work on (a page elsewhere can't use them), or None with `unavailable` saying why.
    origin: str | None
    unavailable: str | None


@get("/auth/passkeys", tags=["auth"])
async def list_passkeys(
    request: Request[Any, Any, Any], current_user: NamedDependency[Principal], services: NamedDependency[Services]
) -> PasskeyList:
    passkeys = [PasskeyInfo.of(p) for p in await services.passkeys.store.of_account(current_user.account.id)]
    try:
        rp = relying_party(services.settings, request)
    except PasskeysUnavailable as exc:
        return PasskeyList(passkeys=passkeys, origin=None, unavailable=exc.message)
    return PasskeyList(passkeys=passkeys, origin=rp.origin, unavailable=None)

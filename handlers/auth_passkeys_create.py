"""POST /api/auth/passkeys — verify a registration response and keep the passkey (201)."""

from typing import Annotated, Any

import msgspec
from litestar import Request, post
from litestar.di import NamedDependency

from handlers.auth_passkeys_list import PasskeyInfo
from handlers.support.openapi import errors, json_body
from pheby.auth import Principal
from pheby.services import Services
from pheby.signin.passkeys import RegistrationCredential
from pheby.signin.recent import require_recent_authentication
from pheby.signin.relying_party import relying_party


class AddPasskeyRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    credential: RegistrationCredential


@post("/auth/passkeys", tags=["auth"], status_code=201, responses=errors(400, 408, 409, 413))
async def add_passkey(
    request: Request[Any, Any, Any],
    data: Annotated[AddPasskeyRequest, json_body(AddPasskeyRequest)],
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> PasskeyInfo:
    """400 `passkey_registration_refused` when the response doesn't verify (wrong origin, challenge...)."""
    await require_recent_authentication(services, current_user)
    rp = relying_party(services.settings, request)
    passkey = await services.passkeys.register(rp, current_user, data.credential, data.name)
    return PasskeyInfo.of(passkey)

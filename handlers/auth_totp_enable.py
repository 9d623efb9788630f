"""POST /api/auth/totp/enable — a code of the pending key turns the second factor on; answers the recovery codes."""

from typing import Annotated, Any

from litestar import Request, post
from litestar.di import NamedDependency

from handlers.support.openapi import errors, json_body
from pheby.auth import Principal
from pheby.services import Services
from pheby.signin.totp_setup import RecoveryCodes, TotpCode, turn_on


@post("/auth/totp/enable", tags=["auth"], status_code=200, responses=errors(400, 408, 409, 413, 422, 429))
async def totp_enable(
    request: Request[Any, Any, Any],
    data: Annotated[TotpCode, json_body(TotpCode)],
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> RecoveryCodes:
    """The ten recovery codes, shown this once. 422 for a wrong code, 409 without a pending key; wrong
    codes are limited like the sign-in's (429)."""
    address = services.authenticator.client_address(request)
    return await turn_on(services, current_user.account.id, address, data.code)

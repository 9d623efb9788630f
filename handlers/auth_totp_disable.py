"""POST /api/auth/totp/disable — a current code or a recovery code turns the caller's second factor off."""

from typing import Annotated, Any

from litestar import Request, post
from litestar.di import NamedDependency

from handlers.support.openapi import errors, json_body
from pheby.auth import Principal
from pheby.services import Services
from pheby.signin.totp_setup import TotpCode, TotpStatus, turn_off


@post("/auth/totp/disable", tags=["auth"], status_code=200, responses=errors(400, 408, 409, 413, 422, 429))
async def totp_disable(
    request: Request[Any, Any, Any],
    data: Annotated[TotpCode, json_body(TotpCode)],
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> TotpStatus:
    """A session alone can't turn it off: 422 for a wrong code, 409 when it is off; wrong codes are
    limited like the sign-in's (429)."""
    address = services.authenticator.client_address(request)
    return await turn_off(services, current_user.account.id, address, data.code)

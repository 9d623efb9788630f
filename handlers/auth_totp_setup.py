"""POST /api/auth/totp/setup — a new pending authenticator key for the caller (replaces an unconfirmed one)."""

from litestar import post
from litestar.di import NamedDependency

from handlers.support.openapi import errors
from pheby.auth import Principal
from pheby.services import Services
from pheby.signin.totp_setup import TotpKey, set_up


@post("/auth/totp/setup", tags=["auth"], status_code=200, responses=errors(409))
async def totp_setup(current_user: NamedDependency[Principal], services: NamedDependency[Services]) -> TotpKey:
    """The base32 key and its `otpauth://` URI; nothing changes for sign-in until a code confirms it
    (`POST /api/auth/totp/enable`). 409 while a second factor is on."""
    return await set_up(services, current_user.account)

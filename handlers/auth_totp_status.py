"""GET /api/auth/totp — whether the caller's second factor (TOTP) is on, and how many recovery codes are left."""

from litestar import get
from litestar.di import NamedDependency

from pheby.auth import Principal
from pheby.services import Services
from pheby.signin.totp_setup import TotpStatus, status


@get("/auth/totp", tags=["auth"])
async def totp_status(current_user: NamedDependency[Principal], services: NamedDependency[Services]) -> TotpStatus:
    return await status(services, current_user.account.id)

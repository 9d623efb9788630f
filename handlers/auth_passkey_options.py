"""POST /api/auth/passkey/options — options to sign in with a passkey (public: no username needed)."""

from typing import Any

from litestar import Request, post
from litestar.di import NamedDependency

from handlers.support.openapi import errors
from pheby.services import Services
from pheby.signin.relying_party import relying_party


@post("/api/auth/passkey/options", tags=["auth"], status_code=200, responses=errors(403, 429, 503))
async def passkey_sign_in_options(
    request: Request[Any, Any, Any], services: NamedDependency[Services]
) -> dict[str, Any]:
    """`PublicKeyCredentialRequestOptionsJSON` naming no credential (the browser offers the discoverable ones);
    403 `passkeys_unavailable` where passkeys can't work (see docs/security.md)."""
    return await services.passkeys.sign_in_options(relying_party(services.settings, request))

"""POST /api/auth/passkeys/options — options to register a passkey for the caller's account.

Needs a recent authentication (403 `reauthentication_required`, see `/api/auth/reauthenticate`).
"""

from typing import Any

from litestar import Request, post
from litestar.di import NamedDependency

from handlers.support.openapi import errors
from pheby.auth import Principal
from pheby.services import Services
from pheby.signin.recent import require_recent_authentication
from pheby.signin.relying_party import relying_party


@post("/auth/passkeys/options", tags=["auth"], status_code=200, responses=errors(429))
async def passkey_registration_options(
    request: Request[Any, Any, Any], current_user: NamedDependency[Principal], services: NamedDependency[Services]
) -> dict[str, Any]:
    """`PublicKeyCredentialCreationOptionsJSON` (binary fields base64url); 403 `passkeys_unavailable` when the
    server has no origin a browser could register on (see docs/security.md)."""
    await require_recent_authentication(services, current_user)
    return await services.passkeys.registration_options(relying_party(services.settings, request), current_user)

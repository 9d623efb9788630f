"""POST /api/auth/passkey — sign in with a passkey; starts a session (`pheby.signin.sessions`)."""

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, post
from litestar.di import NamedDependency

from handlers.support.openapi import errors, json_body
from pheby.services import Services
from pheby.signin.passkeys import AuthenticationCredential
from pheby.signin.relying_party import relying_party
from pheby.signin.sessions import SignedIn, start_session


class PasskeySignInRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    credential: AuthenticationCredential


@post("/api/auth/passkey", tags=["auth"], status_code=200, responses=errors(400, 401, 403, 408, 413, 429, 503))
async def passkey_sign_in(
    request: Request[Any, Any, Any],
    data: Annotated[PasskeySignInRequest, json_body(PasskeySignInRequest)],
    services: NamedDependency[Services],
) -> Response[SignedIn]:
    """401 `passkey_refused` for any response that doesn't verify; failures are limited per address (429)."""
    rp = relying_party(services.settings, request)
    passkeys = services.passkeys
    async with passkeys.guard.attempt(services.authenticator.client_address(request)):
        account = await passkeys.sign_in(rp, data.credential)
    return await start_session(services, request, account, "passkey")

"""POST /api/auth/login/totp — the code step of a password sign-in: the ticket and a code start a session."""

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, post
from litestar.di import NamedDependency

from handlers.support.openapi import errors, json_body
from pheby.services import Services
from pheby.signin.sessions import SignedIn
from pheby.signin.totp import CODE_MAX_CHARS, redeem_ticket


class LoginCodeRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    ticket: Annotated[str, msgspec.Meta(max_length=128)]
    # The authenticator's 6 digits, or one of the recovery codes (spaces and dashes are ignored).
    code: Annotated[str, msgspec.Meta(max_length=CODE_MAX_CHARS)]


@post("/api/auth/login/totp", tags=["auth"], status_code=200, responses=errors(400, 401, 408, 413, 429, 503))
async def login_totp(
    request: Request[Any, Any, Any],
    data: Annotated[LoginCodeRequest, json_body(LoginCodeRequest)],
    services: NamedDependency[Services],
) -> Response[SignedIn]:
    """A TOTP code (once each) or a recovery code (once each); 401 for a wrong code or a spent or expired
    ticket. Wrong codes are limited per address and per account: the 11th attempt in ten minutes is 429."""
    return await redeem_ticket(services, request, data.ticket, data.code)

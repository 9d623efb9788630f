"""POST /api/auth/reauthenticate — the caller proves who they are again (`pheby.signin.recent`).

Adding a passkey asks for a recent authentication; this renews the session's. Limited like a login.
"""

from typing import Annotated, Any

import msgspec
from litestar import Request, post
from litestar.di import NamedDependency

from handlers.support.openapi import errors, json_body
from pheby.auth import Principal
from pheby.services import Services
from pheby.signin.recent import Reauthenticated, reauthenticate
from pheby.signin.totp import CODE_MAX_CHARS


class ReauthenticateRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One of the two: the account's password, or (for the owner) the owner secret; with the password, a code
    of the authenticator (or a recovery code) when two-step sign-in is on."""

    password: Annotated[str, msgspec.Meta(max_length=4096)] | None = None
    secret: Annotated[str, msgspec.Meta(max_length=4096)] | None = None
    code: Annotated[str, msgspec.Meta(max_length=CODE_MAX_CHARS)] | None = None


@post("/auth/reauthenticate", tags=["auth"], status_code=200, responses=errors(400, 408, 413, 429))
async def reauthenticate_session(
    request: Request[Any, Any, Any],
    data: Annotated[ReauthenticateRequest, json_body(ReauthenticateRequest)],
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> Reauthenticated:
    """403 `reauthentication_refused` for a wrong password or secret (counted as a failed login), or a missing
    or wrong code (counted as a failed code)."""
    return await reauthenticate(
        services, request, current_user, password=data.password, secret=data.secret, code=data.code
    )

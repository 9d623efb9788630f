"""POST /api/auth/password — change one's own password with the current one (`pheby.signin.password_change`).

200 `{"ok": true}`; a wrong current password 403 (counted like a failed login: 429 with Retry-After
once locked); a new password the policy refuses 422 with what to do. Either refusal changes nothing.
The account's other sessions end, and their sockets close; the calling one keeps working.
"""

from typing import Annotated, Any

import msgspec
from litestar import Request, post
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec

from handlers.support.errors import ErrorResponse
from handlers.support.openapi import errors, json_body
from pheby.auth import Principal
from pheby.services import Services
from pheby.signin.password_change import change_password

PASSWORD_MAX_CHARS = 4096  # as the login's


class PasswordChange(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    current_password: Annotated[str, msgspec.Meta(max_length=PASSWORD_MAX_CHARS)]
    new_password: Annotated[str, msgspec.Meta(max_length=PASSWORD_MAX_CHARS)]


class PasswordChanged(msgspec.Struct, frozen=True):
    ok: bool


REFUSED = ResponseSpec(
    data_container=ErrorResponse,
    description="The current password is wrong (counted like a failed login), the account has no password the "
    "caller may set, or a cookie-authenticated change without an allowed Origin header",
    generate_examples=False,
)


@post(
    "/auth/password",
    tags=["auth"],
    status_code=200,
    responses={**errors(400, 408, 409, 413, 422, 429), 403: REFUSED},
)
async def change_own_password(
    request: Request[Any, Any, Any],
    data: Annotated[PasswordChange, json_body(PasswordChange)],
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> PasswordChanged:
    """`current_password` empty sets a first password, for the owner signed in with the secret only."""
    address = services.authenticator.client_address(request)
    await change_password(services, current_user, address, data.current_password, data.new_password)
    return PasswordChanged(ok=True)

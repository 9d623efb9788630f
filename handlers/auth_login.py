"""POST /api/auth/login — password login for Hope; sets the `hope_session` cookie (Secure over https)."""

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, post
from litestar.datastructures import Cookie
from litestar.di import NamedDependency

from handlers.support.openapi import errors, json_body
from pheby.auth import SESSION_COOKIE
from pheby.errors import Unauthorized
from pheby.services import Services


class LoginRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    username: Annotated[str, msgspec.Meta(max_length=256)]
    password: Annotated[str, msgspec.Meta(max_length=4096)]


class LoginResponse(msgspec.Struct, frozen=True):
    token: str
    expires_at: float


@post("/api/auth/login", tags=["auth"], status_code=200, responses=errors(400, 401, 408, 413, 429, 503))
async def login(
    request: Request[Any, Any, Any],
    data: Annotated[LoginRequest, json_body(LoginRequest)],
    services: NamedDependency[Services],
) -> Response[LoginResponse]:
    """Limited per address and per username (429 with Retry-After); the hash waits for its limiter (else 429)."""
    guard = services.login_guard
    address = services.authenticator.client_address(request)
    async with guard.attempt(address, data.username):
        account = await services.accounts.verify_password(data.username, data.password, hashing=guard.hashing)
        if account is None:
            await guard.record_failure(address, data.username)
            raise Unauthorized("Wrong username or password")
    ttl = services.settings.session_ttl_seconds
    issued = await services.accounts.issue_token(account.id, "session", ttl)
    cookie = Cookie(
        key=SESSION_COOKIE,
        value=issued.token,
        max_age=ttl,
        httponly=True,
        samesite="lax",
        secure=services.authenticator.is_https(request),
        path="/",
    )
    assert issued.expires_at is not None  # session tokens always expire
    return Response(LoginResponse(token=issued.token, expires_at=issued.expires_at), cookies=[cookie])

"""POST /api/auth/login — password login for Hope; sets the `hope_session` cookie."""

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, post
from litestar.datastructures import Cookie
from litestar.di import NamedDependency

from handlers.openapi import errors, json_body
from pheby.auth import SESSION_COOKIE
from pheby.errors import RateLimited, Unauthorized
from pheby.services import Services


class LoginRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    username: str
    password: str


class LoginResponse(msgspec.Struct, frozen=True):
    token: str
    expires_at: float


@post("/api/auth/login", tags=["auth"], status_code=200, responses=errors(400, 401, 408, 413, 429, 503))
async def login(
    request: Request[Any, Any, Any],
    data: Annotated[LoginRequest, json_body(LoginRequest)],
    services: NamedDependency[Services],
) -> Response[LoginResponse]:
    subject = f"{services.authenticator.client_address(request)}|{data.username}"
    async with services.login_limiter.one_at_a_time(subject):  # else concurrent guesses all pass the check
        if await services.login_limiter.is_locked(subject):
            raise RateLimited("Too many failed logins; try again in a minute")
        account = await services.accounts.verify_password(data.username, data.password)
        if account is None:
            await services.login_limiter.record_failure(subject)
            raise Unauthorized("Wrong username or password")
    ttl = services.settings.session_ttl_seconds
    issued = await services.accounts.issue_token(account.id, "session", ttl)
    cookie = Cookie(
        key=SESSION_COOKIE,
        value=issued.token,
        max_age=ttl,
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
        path="/",
    )
    assert issued.expires_at is not None  # session tokens always expire
    return Response(LoginResponse(token=issued.token, expires_at=issued.expires_at), cookies=[cookie])

"""POST /api/auth/login — password login; starts a session (`pheby.signin.sessions`)."""

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, post
from litestar.di import NamedDependency

from handlers.support.openapi import errors, json_body
from pheby.errors import Unauthorized
from pheby.services import Services
from pheby.signin.sessions import SignedIn, start_session


class LoginRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    username: Annotated[str, msgspec.Meta(max_length=256)]
    password: Annotated[str, msgspec.Meta(max_length=4096)]


@post("/api/auth/login", tags=["auth"], status_code=200, responses=errors(400, 401, 408, 413, 429, 503))
async def login(
    request: Request[Any, Any, Any],
    data: Annotated[LoginRequest, json_body(LoginRequest)],
    services: NamedDependency[Services],
) -> Response[SignedIn]:
    """Limited per address and per username (429 with Retry-After); the hash waits for its limiter (else 429)."""
    guard = services.login_guard
    address = services.authenticator.client_address(request)
    async with guard.attempt(address, data.username):
        account = await services.accounts.verify_password(data.username, data.password, hashing=guard.hashing)
        if account is None:
            await guard.record_failure(address, data.username)
            raise Unauthorized("Wrong username or password")
    return await start_session(services, request, account, "password")

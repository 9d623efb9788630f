"""POST /api/auth/login — password login; starts a session (`pheby.signin.sessions`), or, for an account
with a second factor, answers 202 with the ticket of the code step (`pheby.signin.totp`)."""

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, post
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec

from handlers.support.errors import ErrorResponse
from handlers.support.openapi import errors, json_body
from pheby.errors import Unauthorized
from pheby.services import Services
from pheby.signin.sessions import SignedIn, start_session
from pheby.signin.totp import SecondFactorNeeded, second_step


class LoginRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    username: Annotated[str, msgspec.Meta(max_length=256)]
    password: Annotated[str, msgspec.Meta(max_length=4096)]


SECOND_FACTOR_RESPONSES = {
    202: ResponseSpec(
        data_container=SecondFactorNeeded,
        description="The password is right and the account has a second factor: no session yet; "
        "send a code with the ticket to POST /api/auth/login/totp before it expires",
        generate_examples=False,
    ),
    403: ResponseSpec(
        data_container=ErrorResponse,
        description="The server requires a second factor (PHEBY_REQUIRE_SECOND_FACTOR) and this account has none",
        generate_examples=False,
    ),
}


@post(
    "/api/auth/login",
    tags=["auth"],
    status_code=200,
    responses={**errors(400, 401, 408, 413, 429, 503), **SECOND_FACTOR_RESPONSES},
)
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
    code_step = await second_step(services, account)
    if code_step is not None:
        return code_step
    return await start_session(services, request, account, "password")

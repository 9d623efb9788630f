"""POST /api/auth/session — trades the owner secret (`PHEBY_SECRET`) or an account's API token for a
session (`pheby.signin.sessions`), so a browser holds an HttpOnly cookie rather than the secret.

Limited like the password login per source address (the login's own limiter: 5 failures a minute,
then 429 with Retry-After), and only so: there is no username to count by, and a subject shared by
every caller would let anyone lock the owner out. A wrong secret is 401.
"""

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, post
from litestar.di import NamedDependency

from handlers.support.openapi import errors, json_body
from pheby import metrics
from pheby.errors import Unauthorized
from pheby.services import Services
from pheby.signin.sessions import SignedIn, start_session


class SessionRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    secret: Annotated[str, msgspec.Meta(max_length=4096)]


@post("/api/auth/session", tags=["auth"], status_code=200, responses=errors(400, 401, 408, 413, 429, 503))
async def start_session_with_secret(
    request: Request[Any, Any, Any],
    data: Annotated[SessionRequest, json_body(SessionRequest)],
    services: NamedDependency[Services],
) -> Response[SignedIn]:
    guard = services.login_guard
    address = services.authenticator.client_address(request)
    async with guard.address_attempt(address):
        principal = await services.authenticator.for_session_exchange(data.secret.strip())
        if principal is None:
            metrics.LOGIN_FAILURES.inc()
            await guard.by_address.record_failure(address)
            raise Unauthorized("That secret or token was not accepted")
    return await start_session(services, request, principal.account, "secret")

"""Dependencies and the `/api` guard: the services container, and the caller as `current_user`.

Every route under the `/api` router passes the `authenticated` guard, which resolves the caller once,
before Litestar reads parameters or the body: a malformed body from an unauthenticated client is 401
(or 403 for a cookie without its Origin), never 400. `current_user` hands handlers that principal.
"""

from typing import Any

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.datastructures import State
from litestar.di import Provide
from litestar.handlers import BaseRouteHandler

from pheby.auth import Principal
from pheby.services import Services


def provide_services(state: State) -> Services:
    services: Services = state.services
    return services


async def authenticated(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Guard: the `/api/*` credential rule (bearer or session cookie), kept in `state.principal`."""
    services: Services = connection.app.state.services
    connection.state.principal = await services.authenticator.for_api(connection)


def provide_current_user(request: Request[Any, Any, Any]) -> Principal:
    principal: Principal = request.state.principal  # set by the `authenticated` guard of the `/api` router
    return principal


DEPENDENCIES = {"services": Provide(provide_services, sync_to_thread=False)}
# Provided by the `/api` router only: a public route that asks for the caller fails at start-up.
API_DEPENDENCIES = {"current_user": Provide(provide_current_user, sync_to_thread=False)}

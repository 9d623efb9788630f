"""The app factory: `create_app(settings)` wires routes, dependencies, errors and the lifespan."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar
from litestar.datastructures import ResponseHeader
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.types import ControllerRouterHandler

from handlers import auth_login, auth_logout, health, me
from handlers.dependencies import DEPENDENCIES
from handlers.errors import EXCEPTION_HANDLERS
from handlers.ws.endpoint import pheby_socket
from pheby.services import open_services
from pheby.settings import Settings
from scheduler import running_scheduler

ROUTES: list[ControllerRouterHandler] = [
    health.healthz,
    auth_login.login,
    auth_logout.logout,
    me.me,
    pheby_socket,
]


def create_app(settings: Settings) -> Litestar:
    """Build the ASGI app for `settings`; resources open in the lifespan and close after it."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        async with open_services(settings) as services, running_scheduler(services) as scheduler:
            app.state.services = services
            app.state.scheduler = scheduler
            yield

    return Litestar(
        route_handlers=ROUTES,
        dependencies=DEPENDENCIES,
        exception_handlers=EXCEPTION_HANDLERS,  # type: ignore[arg-type]
        lifespan=[lifespan],
        openapi_config=OpenAPIConfig(
            title="Pheby server", version="1", path="/schema", render_plugins=[SwaggerRenderPlugin()]
        ),
        response_headers=[ResponseHeader(name="X-Content-Type-Options", value="nosniff")],
        debug=False,
    )

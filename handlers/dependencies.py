"""App-level dependencies: the services container and `current_user` for `/api/*`."""

from litestar import Request
from litestar.datastructures import State
from litestar.di import Provide

from pheby.auth import Principal
from pheby.services import Services


def provide_services(state: State) -> Services:
    services: Services = state.services
    return services


async def provide_current_user(request: Request[object, object, State]) -> Principal:
    services: Services = request.app.state.services
    return await services.authenticator.for_api(request)


DEPENDENCIES = {
    "services": Provide(provide_services, sync_to_thread=False),
    "current_user": Provide(provide_current_user),
}

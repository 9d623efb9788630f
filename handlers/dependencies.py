"""App-level dependencies: the services container and `current_user` for `/api/*`."""

from typing import Any

from litestar import Request
from litestar.datastructures import State
from litestar.di import NamedDependency, Provide

from pheby.auth import Principal
from pheby.services import Services


def provide_services(state: State) -> Services:
    services: Services = state.services
    return services


async def provide_current_user(request: Request[Any, Any, Any], services: NamedDependency[Services]) -> Principal:
    # Depending on `services` (not app.state) lets Litestar resolve the two in sequence, without a task group.
    already: Principal | None = request.state.get("principal")  # set by the `authenticated` guard
    return already if already is not None else await services.authenticator.for_api(request)


DEPENDENCIES = {
    "services": Provide(provide_services, sync_to_thread=False),
    "current_user": Provide(provide_current_user),
}

"""GET (and HEAD) /readyz — readiness, no auth: 200 when storage, Hermes and the database answer,
else 503 naming what is down (`/healthz` stays the liveness check)."""

from typing import Literal

import msgspec
from litestar import HttpMethod, Response, route
from litestar.di import NamedDependency
from litestar.openapi import ResponseSpec
from litestar.openapi.spec import Example

from pheby.readiness import Component, down
from pheby.services import Services


class Readiness(msgspec.Struct, frozen=True, omit_defaults=True):
    status: Literal["ok", "unavailable"]
    down: list[Component] = msgspec.field(default_factory=list)


NOT_READY = ResponseSpec(
    data_container=Readiness,
    description="Something the server needs is unreachable; `down` names it",
    examples=[Example(value={"status": "unavailable", "down": ["storage"]})],
)


@route(
    "/readyz",
    http_method=[HttpMethod.GET, HttpMethod.HEAD],
    tags=["health"],
    responses={503: NOT_READY},
)
async def readyz(services: NamedDependency[Services]) -> Response[Readiness]:
    settings = services.settings
    missing = await down(services.blobs, services.db, settings.hermes_url, settings.hermes_api_key)
    if missing:
        return Response(Readiness(status="unavailable", down=missing), status_code=503)
    return Response(Readiness(status="ok"), status_code=200)

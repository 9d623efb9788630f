"""POST /internal/hermes-plugin/media — the bytes of a run's MEDIA: file, pushed by the companion plugin."""

from typing import Any

from litestar import Request, post
from litestar.di import NamedDependency
from litestar.params import FromQuery

from handlers.support.uploads import refuse_declared_over
from pheby.errors import BadRequest
from pheby.services import Services


@post("/internal/hermes-plugin/media", status_code=201, request_max_body_size=None, include_in_schema=False)
async def plugin_media(
    request: Request[Any, Any, Any],
    services: NamedDependency[Services],
    run_id: FromQuery[str | None] = None,
    filename: FromQuery[str | None] = None,
) -> dict[str, bool]:
    events = services.plugin_events
    events.authenticate(request.headers, request.client.host if request.client else None)
    if not run_id or not filename:
        raise BadRequest("run_id and filename are required")
    refuse_declared_over(request, services.settings.attachment_max_bytes)
    await events.store_media(run_id, filename, request.headers.get("content-type"), request.stream())
    return {"stored": True}

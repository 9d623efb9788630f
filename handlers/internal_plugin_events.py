"""POST /internal/hermes-plugin/events — a push of the companion Hermes plugin (plugin secret only)."""

from typing import Any

import msgspec
from litestar import Request, post
from litestar.di import NamedDependency

from pheby.errors import BadRequest
from pheby.plugin.pushes import PUSH_DECODER
from pheby.protocol.json_input import decode_json
from pheby.services import Services

MAX_EVENT_BYTES = 1024 * 1024


@post("/internal/hermes-plugin/events", status_code=200, request_max_body_size=MAX_EVENT_BYTES, include_in_schema=False)
async def plugin_event(request: Request[Any, Any, Any], services: NamedDependency[Services]) -> dict[str, Any]:
    events = services.plugin_events
    events.authenticate(request.headers, request.client.host if request.client else None)
    try:
        push = decode_json(PUSH_DECODER, await request.body())
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise BadRequest(f"Invalid plugin event: {exc}") from None
    return await events.handle(push)

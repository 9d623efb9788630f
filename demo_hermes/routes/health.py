"""``GET /health`` and ``/v1/health``: open to everyone, as in 0.19.0."""

from typing import Final

from litestar import Response, get

from demo_hermes.wire import json_response

__all__ = ["HEALTH_ROUTES", "HERMES_VERSION"]

HERMES_VERSION: Final = "0.19.0"


@get(["/health", "/v1/health"])
async def health() -> Response[bytes]:
    return json_response({"status": "ok", "platform": "hermes-agent", "version": HERMES_VERSION})


HEALTH_ROUTES: Final = [health]

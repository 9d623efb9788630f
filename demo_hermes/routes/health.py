"""``GET /health`` and ``/v1/health``: open to everyone, as in 0.19.0. The version is 0.19.0's, or the
0.22-era one once the demo has any newer feature."""

from typing import Any, Final

from litestar import Request, Response, get

from demo_hermes.newer import NEWER_VERSION
from demo_hermes.state import demo_state
from demo_hermes.wire import json_response

__all__ = ["HEALTH_ROUTES", "HERMES_VERSION"]

HERMES_VERSION: Final = "0.19.0"


@get(["/health", "/v1/health"])
async def health(request: Request[Any, Any, Any]) -> Response[bytes]:
    version = NEWER_VERSION if demo_state(request).features else HERMES_VERSION
    return json_response({"status": "ok", "platform": "hermes-agent", "version": version})


HEALTH_ROUTES: Final = [health]

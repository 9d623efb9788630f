"""GET /metrics — the Prometheus text exposition, for a scraper holding `PHEBY_METRICS_TOKEN` (bearer).

Mounted only when the token is set (`handlers.support.app`), outside `/api` and the OpenAPI document:
it is the operator's, not a client's. Labels never carry an id, a name, a path or a user's text
(`pheby.metrics`).
"""

import hmac
from typing import Any

from litestar import Request, Response, get
from litestar.di import NamedDependency
from prometheus_client import REGISTRY, generate_latest

from pheby.errors import Unauthorized
from pheby.services import Services

TEXT_FORMAT = "text/plain; version=0.0.4"


@get("/metrics", include_in_schema=False, sync_to_thread=False)
def metrics(request: Request[Any, Any, Any], services: NamedDependency[Services]) -> Response[bytes]:
    expected = f"Bearer {services.settings.metrics_token}".encode()
    given = request.headers.get("authorization", "").encode()
    if not services.settings.metrics_token or not hmac.compare_digest(given, expected):
        raise Unauthorized("The metrics token is required")
    # The classic text format (0.0.4), which every Prometheus reads; Litestar adds the charset.
    return Response(generate_latest(REGISTRY), media_type=TEXT_FORMAT, headers={"Cache-Control": "no-store"})

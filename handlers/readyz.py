"""GET (and HEAD) /readyz — readiness, no auth: 200 when storage, Hermes and the database answer,
else 503 naming what is down (`/healthz` stays the liveness check)."""

from litestar import HttpMethod, Response, route
from litestar.di import NamedDependency

from pheby.readiness import down
from pheby.services import Services


@route("/readyz", http_method=[HttpMethod.GET, HttpMethod.HEAD], tags=["health"])
async def readyz(services: NamedDependency[Services]) -> Response[dict[str, object]]:
    settings = services.settings
    missing = await down(services.blobs, services.db, settings.hermes_url, settings.hermes_api_key)
    if missing:
        return Response({"status": "unavailable", "down": missing}, status_code=503)
    return Response({"status": "ok"}, status_code=200)

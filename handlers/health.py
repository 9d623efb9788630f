"""GET (and HEAD) /healthz — liveness, no auth; load balancers often probe with HEAD."""

from litestar import HttpMethod, route


@route("/healthz", http_method=[HttpMethod.GET, HttpMethod.HEAD], tags=["health"], sync_to_thread=False)
def healthz() -> dict[str, str]:
    return {"status": "ok"}

"""GET /healthz — liveness, no auth."""

from litestar import get


@get("/healthz", tags=["health"], sync_to_thread=False)
def healthz() -> dict[str, str]:
    return {"status": "ok"}

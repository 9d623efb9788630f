"""GET /sw.js — Pheby Web's service worker, at the root so that its scope is the whole app (no auth)."""

from litestar import Response, get

from pheby.web_client import BUNDLE, SHELL_HEADERS


@get("/sw.js", include_in_schema=False, sync_to_thread=False)
def web_service_worker() -> Response[bytes]:
    return Response(BUNDLE.service_worker, media_type="text/javascript", headers=SHELL_HEADERS)

"""GET /manifest.webmanifest — Pheby Web's web app manifest, which makes it installable (no auth)."""

from litestar import Response, get

from pheby.web_client import BUNDLE, MANIFEST_MEDIA_TYPE, SHELL_HEADERS


@get("/manifest.webmanifest", include_in_schema=False, sync_to_thread=False)
def web_manifest() -> Response[bytes]:
    return Response(BUNDLE.manifest, media_type=MANIFEST_MEDIA_TYPE, headers=SHELL_HEADERS)

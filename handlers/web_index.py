"""GET / — Pheby Web's HTML shell (no auth: the page signs in over the protocol itself)."""

from litestar import MediaType, Response, get

from pheby.web_client import BUNDLE, SHELL_HEADERS


@get("/", include_in_schema=False, sync_to_thread=False)
def web_index() -> Response[bytes]:
    return Response(BUNDLE.index_html, media_type=MediaType.HTML, headers=SHELL_HEADERS)

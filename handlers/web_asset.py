"""GET /web/{version}/{path} — one of Pheby Web's files, cacheable forever (the version is a content hash)."""

from litestar import Response, get
from litestar.params import FromPath

from pheby.errors import NotFound
from pheby.web_client import ASSET_HEADERS, BUNDLE


@get("/web/{version:str}/{path:path}", include_in_schema=False, sync_to_thread=False)
def web_asset(version: FromPath[str], path: FromPath[str]) -> Response[bytes]:
    asset = BUNDLE.asset(version, path)
    if asset is None:
        raise NotFound("No such file")
    return Response(asset.body, media_type=asset.media_type, headers=ASSET_HEADERS)

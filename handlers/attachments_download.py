"""GET /attachments/{attachment_id} — the bytes of one of the caller's attachments."""

from typing import Any

from litestar import Request, get
from litestar.di import NamedDependency
from litestar.params import FromPath

from handlers.support.downloads import BlobResponse, attachment_download
from handlers.support.openapi import download_operation, errors
from pheby.services import Services


@get(
    "/attachments/{attachment_id:str}",
    tags=["pheby"],
    operation_class=download_operation(200, ["*/*"]),
    responses=errors(400, 401, 404, 503),
)
async def download_attachment(
    request: Request[Any, Any, Any], services: NamedDependency[Services], attachment_id: FromPath[str]
) -> BlobResponse:
    principal = await services.authenticator.for_attachments(request)
    attachment = await services.attachments.get(principal.account.id, attachment_id)
    return await attachment_download(services, attachment)

"""GET /attachments/{attachment_id} — the bytes of one of the caller's attachments."""

from typing import Any

from litestar import Request, get
from litestar.di import NamedDependency
from litestar.params import FromPath

from handlers.downloads import BlobResponse, attachment_download
from pheby.services import Services


@get("/attachments/{attachment_id:str}", tags=["pheby"])
async def download_attachment(
    request: Request[Any, Any, Any], services: NamedDependency[Services], attachment_id: FromPath[str]
) -> BlobResponse:
    principal = await services.authenticator.for_attachments(request)
    attachment = await services.attachments.get(principal.account.id, attachment_id)
    return await attachment_download(services, attachment)

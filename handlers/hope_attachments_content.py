"""GET /api/attachments/{attachment_id}/content — the private bytes, as a download."""

from litestar import get
from litestar.di import NamedDependency
from litestar.params import FromPath

from handlers.support.downloads import BlobResponse, attachment_download
from handlers.support.openapi import download_operation, errors
from pheby.auth import Principal
from pheby.files.file_types import HOPE_MIME_TYPES
from pheby.services import Services


@get(
    "/attachments/{attachment_id:str}/content",
    tags=["hope"],
    operation_class=download_operation(200, HOPE_MIME_TYPES),
    responses=errors(400, 404),
)
async def get_hope_attachment_content(
    current_user: NamedDependency[Principal], services: NamedDependency[Services], attachment_id: FromPath[str]
) -> BlobResponse:
    attachment = await services.attachments.get(current_user.account.id, attachment_id, "hope")
    return await attachment_download(services, attachment)

"""GET /api/attachments/{attachment_id} — one Hope attachment's metadata."""

from litestar import get
from litestar.di import NamedDependency
from litestar.params import FromPath

from handlers.hope_attachments_create import HopeAttachmentResponse
from handlers.support.openapi import errors
from pheby.auth import Principal
from pheby.services import Services
from pheby.store.attachments import hope_object


@get("/attachments/{attachment_id:str}", tags=["hope"], responses=errors(400, 404))
async def get_hope_attachment(
    current_user: NamedDependency[Principal], services: NamedDependency[Services], attachment_id: FromPath[str]
) -> HopeAttachmentResponse:
    attachment = await services.attachments.get(current_user.account.id, attachment_id, "hope")
    return HopeAttachmentResponse(attachment=hope_object(attachment))

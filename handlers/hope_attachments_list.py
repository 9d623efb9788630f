"""GET /api/attachments — the caller's Hope attachments, newest first (the first 200)."""

import msgspec
from litestar import get
from litestar.di import NamedDependency

from pheby.auth import Principal
from pheby.services import Services
from pheby.store.attachments import HopeAttachment, hope_object


class HopeAttachmentList(msgspec.Struct, frozen=True):
    attachments: list[HopeAttachment]
    next_cursor: None = None


@get("/attachments", tags=["hope"])
async def list_hope_attachments(
    current_user: NamedDependency[Principal], services: NamedDependency[Services]
) -> HopeAttachmentList:
    attachments = await services.attachments.list_hope(current_user.account.id)
    return HopeAttachmentList(attachments=[hope_object(a) for a in attachments])

"""DELETE /api/attachments/{attachment_id} — removes the bytes and tombstones the metadata."""

from litestar import delete
from litestar.di import NamedDependency
from litestar.params import FromPath

from handlers.support.openapi import errors
from pheby.auth import Principal
from pheby.services import Services


@delete("/attachments/{attachment_id:str}", status_code=200, tags=["hope"], responses=errors(400, 404))
async def delete_hope_attachment(
    current_user: NamedDependency[Principal], services: NamedDependency[Services], attachment_id: FromPath[str]
) -> dict[str, bool]:
    await services.attachments.delete(current_user.account.id, attachment_id, "hope")
    return {"ok": True}

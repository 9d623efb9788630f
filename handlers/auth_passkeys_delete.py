"""DELETE /api/auth/passkeys/{passkey_id} — remove one of the caller's own passkeys (204)."""

from litestar import delete
from litestar.di import NamedDependency
from litestar.params import FromPath

from handlers.support.openapi import errors
from pheby.auth import Principal
from pheby.errors import NotFound
from pheby.services import Services


@delete("/auth/passkeys/{passkey_id:str}", tags=["auth"], status_code=204, responses=errors(400, 404))
async def delete_passkey(
    current_user: NamedDependency[Principal], services: NamedDependency[Services], passkey_id: FromPath[str]
) -> None:
    if not await services.passkeys.store.delete(current_user.account.id, passkey_id):
        raise NotFound("No such passkey")

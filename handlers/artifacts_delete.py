"""DELETE /api/artifacts/{artifact_id} — tombstone the artifact; it and its versions are 404 afterwards."""

from litestar import delete
from litestar.di import NamedDependency
from litestar.params import FromPath

from handlers.support.openapi import errors
from pheby.auth import Principal
from pheby.services import Services


@delete("/artifacts/{artifact_id:str}", tags=["artifacts"], status_code=200, responses=errors(400, 404))
async def delete_artifact(
    current_user: NamedDependency[Principal], services: NamedDependency[Services], artifact_id: FromPath[str]
) -> dict[str, bool]:
    await services.artifacts.delete(current_user.account.id, artifact_id)
    return {"ok": True}

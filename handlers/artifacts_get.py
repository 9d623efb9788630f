"""GET /api/artifacts/{artifact_id}?revision=N — one artifact with its content (of revision N if given)."""

from litestar import get
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery

from handlers.openapi import errors
from pheby.artifacts import ArtifactBody
from pheby.auth import Principal
from pheby.services import Services


@get("/artifacts/{artifact_id:str}", tags=["artifacts"], responses=errors(400, 404))
async def get_artifact(
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
    artifact_id: FromPath[str],
    revision: FromQuery[int | None] = None,
) -> ArtifactBody:
    return ArtifactBody(artifact=await services.artifacts.get(current_user.account.id, artifact_id, revision))

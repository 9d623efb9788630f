"""GET /api/artifacts/{artifact_id}?revision=N — one artifact with its content (of revision N if given)."""

from typing import Annotated

from litestar import get
from litestar.di import NamedDependency
from litestar.params import FromPath, QueryParameter

from handlers.support.openapi import errors
from pheby.auth import Principal
from pheby.services import Services
from pheby.store.artifacts import ArtifactBody

# Revisions count from 1; any other number is no version of the artifact, answered 404 like one not
# kept (so the range is stated in the document, not enforced as a 400).
REVISION = QueryParameter(schema_extra={"minimum": 1, "maximum": 2**63 - 1})


@get("/artifacts/{artifact_id:str}", tags=["artifacts"], responses=errors(400, 404))
async def get_artifact(
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
    artifact_id: FromPath[str],
    revision: Annotated[int | None, REVISION] = None,
) -> ArtifactBody:
    return ArtifactBody(artifact=await services.artifacts.get(current_user.account.id, artifact_id, revision))

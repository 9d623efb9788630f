"""POST /api/artifacts — a new artifact at revision 1."""

import msgspec
from litestar import post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from pheby.artifacts import ArtifactBody
from pheby.auth import Principal
from pheby.services import Services


class CreateArtifactRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    title: str
    kind: str = "markdown"  # checked by the service, so a wrong kind is a 422 like the other value rules
    content: str = ""


@post("/artifacts", tags=["artifacts"], status_code=201)
async def create_artifact(
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
    data: JSONBody[CreateArtifactRequest],
) -> ArtifactBody:
    artifact = await services.artifacts.create(current_user.account.id, data.title, data.kind, data.content)
    return ArtifactBody(artifact=artifact)

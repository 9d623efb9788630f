"""PATCH /api/artifacts/{artifact_id} — edit against the revision the client last saw (else 409)."""

import msgspec
from litestar import patch
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody

from pheby.artifacts import ArtifactBody
from pheby.auth import Principal
from pheby.services import Services


class UpdateArtifactRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    # Optional here so that a missing revision is the spec's 409, not a body-shape 400.
    revision: int | None = None
    title: str | None = None
    kind: str | None = None
    content: str | None = None


@patch("/api/artifacts/{artifact_id:str}", tags=["artifacts"])
async def update_artifact(
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
    artifact_id: FromPath[str],
    data: JSONBody[UpdateArtifactRequest],
) -> ArtifactBody:
    artifact = await services.artifacts.update(
        current_user.account.id,
        artifact_id,
        data.revision,
        title=data.title,
        kind=data.kind,
        content=data.content,
    )
    return ArtifactBody(artifact=artifact)

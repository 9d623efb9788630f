"""PATCH /api/artifacts/{artifact_id} — edit against the revision the client last saw (else 409)."""

from typing import Any

import msgspec
from litestar import patch
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody

from handlers.bodies import read_body
from pheby.artifacts import ArtifactBody
from pheby.auth import Principal
from pheby.errors import BadRequest
from pheby.services import Services


class UpdateArtifactRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    # Optional here so that a missing revision is the spec's 409, not a body-shape 400.
    revision: int | None = None
    title: str | None = None
    kind: str | None = None
    content: str | None = None


@patch("/artifacts/{artifact_id:str}", tags=["artifacts"])
async def update_artifact(
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
    artifact_id: FromPath[str],
    data: JSONBody[dict[str, Any]],
) -> ArtifactBody:
    body = read_body(data, UpdateArtifactRequest, BadRequest)  # strictly: a revision "1" is not 1
    artifact = await services.artifacts.update(
        current_user.account.id,
        artifact_id,
        body.revision,
        title=body.title,
        kind=body.kind,
        content=body.content,
    )
    return ArtifactBody(artifact=artifact)

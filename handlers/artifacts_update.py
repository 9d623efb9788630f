"""PATCH /api/artifacts/{artifact_id} — edit against the revision the client last saw (else 409)."""

from typing import Annotated, Any

import msgspec
from litestar import patch
from litestar.di import NamedDependency
from litestar.params import FromPath

from handlers.artifacts_create import CONTENT_SCHEMA, KIND_SCHEMA, TITLE_SCHEMA
from handlers.support.bodies import read_body
from handlers.support.openapi import errors, json_body
from pheby.auth import Principal
from pheby.errors import BadRequest
from pheby.services import Services
from pheby.store.artifacts import ArtifactBody


class UpdateArtifactRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    # Optional here so that a missing revision is the spec's 409, not a body-shape 400.
    revision: int | None = None
    # null is "not given" here; the schema says string, the one value a client means to send.
    title: Annotated[str | None, msgspec.Meta(extra_json_schema=TITLE_SCHEMA)] = None
    kind: Annotated[str | None, msgspec.Meta(extra_json_schema=KIND_SCHEMA)] = None
    content: Annotated[str | None, msgspec.Meta(extra_json_schema=CONTENT_SCHEMA)] = None


# Something to change: a title, a kind or a content (else 422).
_SOMETHING = [{"required": [field]} for field in ("title", "kind", "content")]


@patch("/artifacts/{artifact_id:str}", tags=["artifacts"], responses=errors(400, 404, 408, 409, 413, 422))
async def update_artifact(
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
    artifact_id: FromPath[str],
    data: Annotated[dict[str, Any], json_body(UpdateArtifactRequest, any_of=_SOMETHING)],
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

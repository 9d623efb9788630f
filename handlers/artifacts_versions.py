"""GET /api/artifacts/{artifact_id}/versions — the artifact's versions, newest first."""

import msgspec
from litestar import get
from litestar.di import NamedDependency
from litestar.params import FromPath

from handlers.support.openapi import errors
from pheby.auth import Principal
from pheby.services import Services
from pheby.store.artifacts import ArtifactVersion


class VersionList(msgspec.Struct, frozen=True):
    versions: list[ArtifactVersion]
    next_cursor: None = None  # bounded by the versions-per-artifact limit


@get("/artifacts/{artifact_id:str}/versions", tags=["artifacts"], responses=errors(400, 404))
async def list_artifact_versions(
    current_user: NamedDependency[Principal], services: NamedDependency[Services], artifact_id: FromPath[str]
) -> VersionList:
    return VersionList(versions=await services.artifacts.versions(current_user.account.id, artifact_id))

"""GET /api/artifacts — the caller's artifacts, metadata only (GET one to load its content)."""

import msgspec
from litestar import get
from litestar.di import NamedDependency

from pheby.auth import Principal
from pheby.services import Services
from pheby.store.artifacts import ArtifactSummary


class ArtifactList(msgspec.Struct, frozen=True):
    artifacts: list[ArtifactSummary]
    next_cursor: None = None  # the first 200 is all an account can have alive; no paging yet


@get("/artifacts", tags=["artifacts"])
async def list_artifacts(current_user: NamedDependency[Principal], services: NamedDependency[Services]) -> ArtifactList:
    return ArtifactList(artifacts=await services.artifacts.list_live(current_user.account.id))

"""GET /api/memory — the account's Hermes memory sections (`memory` and `user`) with their revisions."""

from litestar import get
from litestar.di import NamedDependency

from handlers.support.openapi import errors
from pheby.auth import Principal
from pheby.hermes.memory import MemorySections
from pheby.services import Services


@get("/memory", tags=["memory"], responses=errors(501))
async def get_memory(current_user: NamedDependency[Principal], services: NamedDependency[Services]) -> MemorySections:
    return MemorySections(sections=await services.memory.sections(current_user.account))

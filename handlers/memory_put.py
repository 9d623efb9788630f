"""PUT /api/memory/{section} — replace one memory section, given the revision it replaces."""

from litestar import put
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody

from pheby.auth import Principal
from pheby.memory import MemorySection, MemoryUpdate
from pheby.services import Services


@put("/memory/{section:str}", tags=["memory"])
async def put_memory(
    section: FromPath[str],
    data: JSONBody[MemoryUpdate],
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> MemorySection:
    return await services.memory.write(current_user.account, section, data.content, data.revision)

"""PUT /api/memory/{section} — replace one memory section, given the revision it replaces."""

from typing import Annotated

from litestar import put
from litestar.di import NamedDependency
from litestar.params import PathParameter

from handlers.support.openapi import errors, json_body
from pheby.auth import Principal
from pheby.hermes.memory import SECTION_FILES, MemorySection, MemoryUpdate
from pheby.services import Services


@put("/memory/{section:str}", tags=["memory"], responses=errors(400, 404, 408, 409, 413, 422, 501))
async def put_memory(
    section: Annotated[str, PathParameter(schema_extra={"enum": list(SECTION_FILES)})],
    data: Annotated[MemoryUpdate, json_body(MemoryUpdate)],
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> MemorySection:
    return await services.memory.write(current_user.account, section, data.content, data.revision)

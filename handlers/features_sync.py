"""GET /api/features/sync?after=N — the caller's attachment and artifact creates and deletes since N.

Independent of the conversation sync: clients keep this cursor separately.
"""

from typing import Annotated

import msgspec
from litestar import get
from litestar.di import NamedDependency
from litestar.params import Parameter

from handlers.support.openapi import errors
from pheby.auth import Principal
from pheby.services import Services
from pheby.store.changes import Change

# Sequences are SQLite integers; anything beyond is not a cursor this server gave out.
_SEQUENCE_MAX = 2**63 - 1
# Litestar writes `ge`/`le` as floats, and 2**63 - 1 as a float is 2**63: the document states them exactly.
_EXACT_BOUNDS = {"minimum": 0, "maximum": _SEQUENCE_MAX}


class ChangePage(msgspec.Struct, frozen=True):
    changes: list[Change]
    cursor: int  # pass back as `after`; unchanged when there was nothing new


@get("/features/sync", tags=["features"], responses=errors(400))
async def features_sync(
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
    after: Annotated[int, Parameter(ge=0, le=_SEQUENCE_MAX, schema_extra=_EXACT_BOUNDS)] = 0,
) -> ChangePage:
    changes = await services.change_feed.after(current_user.account.id, after)
    return ChangePage(changes=changes, cursor=changes[-1].sequence if changes else after)

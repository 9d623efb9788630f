"""GET /api/features/sync?after=N — the caller's attachment and artifact creates and deletes since N.

Independent of the conversation sync: clients keep this cursor separately.
"""

import msgspec
from litestar import get
from litestar.di import NamedDependency
from litestar.params import FromQuery

from pheby.auth import Principal
from pheby.changes import Change
from pheby.errors import BadRequest
from pheby.services import Services

# Sequences are SQLite integers; anything beyond is not a cursor this server gave out.
_SEQUENCE_MAX = 2**63 - 1


class ChangePage(msgspec.Struct, frozen=True):
    changes: list[Change]
    cursor: int  # pass back as `after`; unchanged when there was nothing new


@get("/features/sync", tags=["features"])
async def features_sync(
    current_user: NamedDependency[Principal], services: NamedDependency[Services], after: FromQuery[int] = 0
) -> ChangePage:
    if not 0 <= after <= _SEQUENCE_MAX:
        raise BadRequest("after must be a non-negative integer (a cursor from an earlier response, or 0)")
    changes = await services.change_feed.after(current_user.account.id, after)
    return ChangePage(changes=changes, cursor=changes[-1].sequence if changes else after)

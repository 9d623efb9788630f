"""GET /api/me — the calling account (id and name only)."""

from litestar import get
from litestar.di import NamedDependency

from pheby.auth import Principal


@get("/me", tags=["auth"], sync_to_thread=False)
def me(current_user: NamedDependency[Principal]) -> dict[str, str]:
    return {"id": current_user.account.id, "name": current_user.account.name}

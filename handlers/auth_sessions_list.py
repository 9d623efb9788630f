"""GET /api/auth/sessions — the caller's live sessions, newest first; `current` marks the calling one."""

import msgspec
from litestar import get
from litestar.di import NamedDependency

from pheby.auth import Principal
from pheby.services import Services


class SessionView(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    device: str | None
    method: str | None
    created_at: float
    last_used_at: float | None
    expires_at: float | None
    current: bool


class SessionList(msgspec.Struct, frozen=True):
    sessions: list[SessionView]


@get("/auth/sessions", tags=["auth"])
async def list_sessions(current_user: NamedDependency[Principal], services: NamedDependency[Services]) -> SessionList:
    sessions = await services.sessions.of_account(current_user.account.id)
    return SessionList(
        sessions=[
            SessionView(
                id=s.id,
                device=s.device,
                method=s.method,
                created_at=s.created_at,
                last_used_at=s.last_used_at,
                expires_at=s.expires_at,
                current=s.id == current_user.token_id,
            )
            for s in sessions
        ]
    )

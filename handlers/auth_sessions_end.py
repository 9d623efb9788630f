"""DELETE /api/auth/sessions/{session_id} — ends one of the caller's sessions (204) and closes its
sockets at once; a session that is not the caller's is 404, as one that doesn't exist."""

from litestar import delete
from litestar.di import NamedDependency
from litestar.params import FromPath

from handlers.support.openapi import errors
from pheby.auth import Principal
from pheby.errors import NotFound
from pheby.revocation import SESSION_ENDED
from pheby.services import Services


@delete("/auth/sessions/{session_id:str}", tags=["auth"], status_code=204, responses=errors(400, 404))
async def end_session(
    current_user: NamedDependency[Principal], services: NamedDependency[Services], session_id: FromPath[str]
) -> None:
    if not await services.sessions.end(current_user.account.id, session_id):
        raise NotFound("No such session")
    services.revocations.close_token(session_id, SESSION_ENDED)

"""DELETE /api/auth/sessions — ends every session of the caller's but the one of this call (204),
closing their sockets at once. Called with the owner secret or an API token, it ends them all."""

from litestar import delete
from litestar.di import NamedDependency

from pheby.auth import Principal
from pheby.revocation import SESSION_ENDED
from pheby.services import Services


@delete("/auth/sessions", tags=["auth"], status_code=204)
async def end_other_sessions(current_user: NamedDependency[Principal], services: NamedDependency[Services]) -> None:
    for session_id in await services.sessions.end_all_but(current_user.account.id, current_user.token_id):
        services.revocations.close_token(session_id, SESSION_ENDED)

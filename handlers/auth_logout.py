"""POST /api/auth/logout — revokes the session (or token) that authenticated the call.

The WebSockets that said hello with it are closed at once (`unauthorized`, then 1008).
"""

from typing import Any

from litestar import Request, Response, post
from litestar.di import NamedDependency

from pheby.auth import Principal
from pheby.services import Services
from pheby.signin.sessions import ended_session_cookie


@post("/auth/logout", tags=["auth"], status_code=200)
async def logout(
    request: Request[Any, Any, Any], current_user: NamedDependency[Principal], services: NamedDependency[Services]
) -> Response[dict[str, bool]]:
    if current_user.token_id is not None:
        await services.accounts.revoke_token(current_user.token_id)
        services.revocations.close_token(current_user.token_id)
    ended = ended_session_cookie(https=services.authenticator.is_https(request))
    return Response({"ok": True}, cookies=[ended])

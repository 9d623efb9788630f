"""POST /api/auth/logout — revokes the session (or token) that authenticated the call.

The WebSockets that said hello with it are closed at once (`unauthorized`, then 1008).
"""

from litestar import Response, post
from litestar.datastructures import Cookie
from litestar.di import NamedDependency

from pheby.auth import SESSION_COOKIE, Principal
from pheby.services import Services


@post("/auth/logout", tags=["auth"], status_code=200)
async def logout(
    current_user: NamedDependency[Principal], services: NamedDependency[Services]
) -> Response[dict[str, bool]]:
    if current_user.token_id is not None:
        await services.accounts.revoke_token(current_user.token_id)
        services.revocations.close_token(current_user.token_id)
    expired = Cookie(key=SESSION_COOKIE, value="", max_age=0, httponly=True, samesite="lax", path="/")
    return Response({"ok": True}, cookies=[expired])

"""GET /api/auth/oidc/start — sends the browser to the identity provider (code flow, PKCE S256, state, nonce).

The state also goes into a short-lived HttpOnly cookie, so only the browser that started a sign-in can
finish it (`auth_oidc_callback`): a link carrying someone else's code and state signs nobody in.
"""

from typing import Any

from litestar import Request, get
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.response import Redirect

from pheby.services import Services
from pheby.signin.oidc import OidcFailure
from pheby.signin.oidc_browser import failed, state_cookie


@get(
    "/api/auth/oidc/start",
    tags=["auth"],
    status_code=302,
    responses={302: ResponseSpec(None, description="To the provider, or back to `/?signin_error=<code>`")},
)
async def oidc_start(request: Request[Any, Any, Any], services: NamedDependency[Services]) -> Redirect:
    https = services.authenticator.is_https(request)
    try:
        address = services.authenticator.client_address(request)
        url, state = await services.oidc.begin(callback_url(request, services), address)
    except OidcFailure as exc:
        return failed(exc, https=https)
    return Redirect(url, status_code=302, cookies=[state_cookie(state, https=https)])


def callback_url(request: Request[Any, Any, Any], services: Services) -> str:
    """The redirect URI the provider has registered: `<PHEBY_PUBLIC_URL>/api/auth/oidc/callback`."""
    return f"{services.authenticator.own_origin(request)}/api/auth/oidc/callback"

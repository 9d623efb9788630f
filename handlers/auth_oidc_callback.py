"""GET /api/auth/oidc/callback?code&state — where the identity provider sends the browser back.

Ends in a session (`pheby.signin.sessions`) and a redirect to `/` with its cookie, or a redirect to
`/?signin_error=<code>`: every refusal is one of `pheby.signin.oidc.FailureCode`, never a 500.
"""

import hmac
import logging
from typing import Any

from litestar import Request, get
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.response import Redirect

from handlers.auth_oidc_start import callback_url
from pheby.services import Services
from pheby.signin.oidc import OidcFailure
from pheby.signin.oidc_browser import ended_state_cookie, failed, state_cookie_name
from pheby.signin.sessions import issue_session

log = logging.getLogger("pheby.signin.oidc")
MAX_PARAM_CHARS = 2048  # codes and states are far shorter
SIGNED_IN_OR_REFUSED = "To `/` signed in (the session cookie set), or to `/?signin_error=<code>`"


@get(
    "/api/auth/oidc/callback",
    tags=["auth"],
    status_code=302,
    responses={302: ResponseSpec(None, description=SIGNED_IN_OR_REFUSED)},
)
async def oidc_callback(request: Request[Any, Any, Any], services: NamedDependency[Services]) -> Redirect:
    """Query parameters (read raw, so no error echoes them): `code` and `state`, or the provider's `error`."""
    https = services.authenticator.is_https(request)
    query = request.query_params
    state, code, error = query.get("state") or "", query.get("code") or "", query.get("error") or ""
    try:
        given = request.cookies.get(state_cookie_name(https=https), "")
        ours = bool(state) and hmac.compare_digest(given.encode(), state.encode())
        if error:  # nothing to sign in with: say what the provider said (some leave the state out)
            if ours:
                await services.oidc.forget(state)
            answered = f"the provider answered {error[:64]!r}"
            raise OidcFailure("denied" if error == "access_denied" else "provider", answered)
        if not state or len(state) > MAX_PARAM_CHARS or len(code) > MAX_PARAM_CHARS:
            raise OidcFailure("state", "callback without a usable state")
        if not ours:
            raise OidcFailure("state", "the state is not the one this browser was given")
        if not code:
            raise OidcFailure("provider", "callback without a code")
        claims = await services.oidc.finish(state=state, code=code, redirect_uri=callback_url(request, services))
        account = await services.oidc.account_for(claims)
    except OidcFailure as exc:
        return failed(exc, https=https)
    except Exception:  # a refusal is a redirect whatever broke: the traceback is for the log
        log.exception("OIDC sign-in failed unexpectedly")
        return failed(OidcFailure("provider", "unexpected failure"), https=https)
    session = await issue_session(services, request, account, "oidc")
    log.info("OIDC sign-in: account %r", account.name)
    return Redirect("/", status_code=302, cookies=[session.cookie, ended_state_cookie(https=https)])

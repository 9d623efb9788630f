"""The browser's side of an OIDC sign-in: the cookie binding a sign-in to the browser that began it, and
the redirects that end one (to `/` signed in, or to `/?signin_error=<code>`)."""

import logging

from litestar.datastructures import Cookie
from litestar.response import Redirect

from pheby.signin.oidc import PENDING_TTL_SECONDS, OidcFailure
from pheby.signin.sessions import browser_cookie

log = logging.getLogger("pheby.signin.oidc")


def state_cookie_name(*, https: bool) -> str:
    return "__Host-pheby_oidc_state" if https else "pheby_oidc_state"


def state_cookie(state: str, *, https: bool, max_age: int = PENDING_TTL_SECONDS) -> Cookie:
    """HttpOnly, SameSite=Lax: sent along when the provider sends the browser back (a top-level GET)."""
    return browser_cookie(state_cookie_name(https=https), state, max_age, https=https)


def ended_state_cookie(*, https: bool) -> Cookie:
    return state_cookie("", https=https, max_age=0)


def failed(failure: OidcFailure, *, https: bool) -> Redirect:
    """Back to the page with a short code it explains; the reason in the log, never a token or code."""
    log.warning("OIDC sign-in refused: %s (%s)", failure.code, failure.detail)
    return Redirect(f"/?signin_error={failure.code}", status_code=302, cookies=[ended_state_cookie(https=https)])

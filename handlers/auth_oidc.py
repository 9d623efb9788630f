"""GET /api/auth/oidc — whether OpenID Connect sign-in is offered, and the provider's name for the button."""

import msgspec
from litestar import get
from litestar.di import NamedDependency

from pheby.services import Services


class OidcOffer(msgspec.Struct, frozen=True):
    enabled: bool
    name: str


@get("/api/auth/oidc", tags=["auth"], sync_to_thread=False)
def oidc_offer(services: NamedDependency[Services]) -> OidcOffer:
    """Public: the sign-in page asks it before anyone is signed in."""
    return OidcOffer(enabled=services.oidc.enabled, name=services.oidc.name)

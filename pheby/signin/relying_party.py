"""Who the passkeys belong to: the WebAuthn relying party (its id and the one origin it accepts).

Both come from `PHEBY_PUBLIC_URL`, never from what a request says about itself (Host,
X-Forwarded-*): a passkey is bound to the id, and a response is accepted only from that origin.

Without a public URL, passkeys work on `http://localhost:<port>` only (browsers allow WebAuthn on
plain http for localhost alone). The port is the one the connection reached, read from the socket
the server accepted it on (the ASGI `server` address), not from the Host header: it is the real port
even when the server was started on port 0. A page on that origin runs on the server's own machine,
which is why it may go without https.
"""

from typing import Any
from urllib.parse import urlsplit

import msgspec
from litestar import Request

from pheby.errors import Forbidden
from pheby.settings import Settings

RP_NAME = "Pheby"


class PasskeysUnavailable(Forbidden):
    code = "passkeys_unavailable"
    default_message = "Passkeys are not available here"


class RelyingParty(msgspec.Struct, frozen=True):
    id: str
    name: str
    origin: str


def relying_party(settings: Settings, request: Request[Any, Any, Any]) -> RelyingParty:
    """This server's relying party, or `PasskeysUnavailable` where a browser could not use one."""
    if settings.public_url:
        parts = urlsplit(settings.public_url)
        host = parts.hostname or ""
        if parts.scheme != "https" and host != "localhost":
            raise PasskeysUnavailable("Passkeys need PHEBY_PUBLIC_URL to be an https:// address")
        return RelyingParty(id=host, name=RP_NAME, origin=settings.public_url)
    server = request.scope.get("server")
    port = server[1] if server is not None else None
    if not isinstance(port, int):  # a Unix socket: no origin a browser could be on
        raise PasskeysUnavailable("Passkeys need PHEBY_PUBLIC_URL to be set")
    origin = f"http://localhost:{port}"
    # A page elsewhere (another name or address of this machine) could never answer for `localhost`: say
    # so now rather than after the browser's prompt. The response's own origin is what is checked, later.
    asked_from = request.headers.get("origin")
    if asked_from is not None and asked_from != origin:
        raise PasskeysUnavailable(f"Passkeys work at {origin} only, unless PHEBY_PUBLIC_URL is set")
    return RelyingParty(id="localhost", name=RP_NAME, origin=origin)

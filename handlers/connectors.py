"""GET /api/connectors — honestly unavailable: there is nothing to manage connectors through."""

import msgspec
from litestar import get
from litestar.di import NamedDependency

from pheby.auth import Principal

REASON = (
    "Connectors are not available: Hermes 0.19.0 has no API to list, connect or manage integrations, "
    "so this server offers none. Hermes's own tools, such as web search and the browser, still work in chat."
)


class ConnectorsStatus(msgspec.Struct, frozen=True):
    connectors: list[dict[str, str]]  # always empty: no switch is shown that would not work
    available: bool
    reason: str


# `current_user` is asked for so that only a signed-in caller gets an answer.
@get("/api/connectors", tags=["features"], sync_to_thread=False)
def connectors(current_user: NamedDependency[Principal]) -> ConnectorsStatus:
    return ConnectorsStatus(connectors=[], available=False, reason=REASON)

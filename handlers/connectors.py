"""GET /api/connectors — honestly unavailable: there is nothing to manage connectors through."""

import msgspec
from litestar import get

REASON = (
    "Connectors are not available: Hermes 0.19.0 has no API to list, connect or manage integrations, "
    "so this server offers none. Hermes's own tools, such as web search and the browser, still work in chat."
)


class ConnectorsStatus(msgspec.Struct, frozen=True):
    connectors: list[dict[str, str]]  # always empty: no switch is shown that would not work
    available: bool
    reason: str


@get("/connectors", tags=["features"], sync_to_thread=False)
def connectors() -> ConnectorsStatus:
    return ConnectorsStatus(connectors=[], available=False, reason=REASON)

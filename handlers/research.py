"""GET /api/research — honestly unavailable: Hermes has no dedicated research mode to drive."""

import msgspec
from litestar import get

REASON = (
    "Research mode is not available: Hermes 0.19.0 has no dedicated research API. "
    "Its normal web search and browser tools still work in chat, where the agent decides when to use them."
)


class ResearchStatus(msgspec.Struct, frozen=True):
    available: bool
    reason: str


@get("/research", tags=["features"], sync_to_thread=False)
def research() -> ResearchStatus:
    return ResearchStatus(available=False, reason=REASON)

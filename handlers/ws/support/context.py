"""What a message handler gets: the caller's account, the services, and a way to answer."""

import logging

from msgspec import UNSET, UnsetType

from handlers.support.errors import storage_failure
from pheby.errors import PhebyError
from pheby.protocol.frames import Error, Event, error_event
from pheby.protocol.hub import Connection
from pheby.services import Services
from pheby.store.accounts import Account
from storage import StorageError

log = logging.getLogger("pheby.ws")

# The codes the protocol defines; anything else is reported as internal_error.
PROTOCOL_CODES = frozenset(
    {
        "unauthorized", "auth_timeout", "version_mismatch", "bad_request", "invalid_json", "unknown_type",
        "not_found", "conversation_not_found", "approval_not_found", "clarify_not_found", "too_large",
        "rate_limited", "run_active", "internal_error", "not_implemented",
    }
)  # fmt: skip


class WsContext:
    """One authenticated connection, seen by the handlers of its messages."""

    def __init__(self, account: Account, services: Services, connection: Connection) -> None:
        self.account = account
        self.services = services
        self.connection = connection

    def reply(self, event: Event) -> None:
        """Send to this connection only."""
        self.connection.send(event)

    def broadcast(self, event: Event) -> None:
        """Send to every connection of this account (this one included)."""
        self.services.hub.broadcast(self.account.id, event)


def error_for(exc: Exception, request_id: str | UnsetType) -> Error:
    """The protocol's error for what a handler raised; anything unexpected is logged and internal_error."""
    if isinstance(exc, StorageError):  # mapped where HTTP maps it, without a traceback
        exc = storage_failure(exc, "a WebSocket message")
    if isinstance(exc, PhebyError):
        code = exc.code if exc.code in PROTOCOL_CODES else "internal_error"
        return error_event(code, exc.message, request_id)
    log.error("message handler failed", exc_info=exc)
    return error_event("internal_error", "Internal error", request_id)


def rid(request_id: str | None) -> str | UnsetType:
    """A message's request_id as an event field (left out when the client sent none)."""
    return UNSET if request_id is None else request_id

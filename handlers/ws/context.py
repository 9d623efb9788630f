"""What a message handler gets: the caller's account, the services, and a way to answer."""

from msgspec import UNSET, UnsetType

from pheby.accounts import Account
from pheby.events import Event
from pheby.hub import Connection
from pheby.services import Services


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


def rid(request_id: str | None) -> str | UnsetType:
    """A message's request_id as an event field (left out when the client sent none)."""
    return UNSET if request_id is None else request_id

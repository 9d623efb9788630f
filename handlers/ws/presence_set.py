"""`presence.set` → `presence.state` reply: whether this client is in front of its user.

A connection is in the foreground from `hello` on; a client that goes to the background (a hidden
tab, a locked phone) says so, and while no connection of the account is in the foreground its
decisions and long results reach it by Web Push (extension of protocol v1, docs/protocol-extensions.md).
"""

from typing import Literal

from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage
from pheby.protocol.frames import PresenceState


class PresenceSet(ClientMessage, frozen=True, tag="presence.set"):
    state: Literal["foreground", "background"]


async def handle(ctx: WsContext, msg: PresenceSet) -> None:
    ctx.connection.foreground = msg.state == "foreground"
    ctx.reply(PresenceState(state=msg.state, request_id=rid(msg.request_id)))

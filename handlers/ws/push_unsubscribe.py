"""`push.unsubscribe` → `push.unsubscribed` reply: stop pushing to one of the account's subscriptions.

`not_found` for an id the account does not have (extension of protocol v1, docs/protocol-extensions.md).
"""

from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage
from pheby.errors import NotFound
from pheby.protocol.frames import PushUnsubscribed


class PushUnsubscribe(ClientMessage, frozen=True, tag="push.unsubscribe"):
    subscription_id: str


async def handle(ctx: WsContext, msg: PushUnsubscribe) -> None:
    if not await ctx.services.push.subscriptions.delete(ctx.account.id, msg.subscription_id):
        raise NotFound("No such push subscription")
    ctx.reply(PushUnsubscribed(subscription_id=msg.subscription_id, request_id=rid(msg.request_id)))

"""`push.subscribe` → `push.subscribed` reply: keep a device's Web Push subscription (extension of protocol v1).

The same shape as `POST /api/push/subscriptions` (see docs/protocol-extensions.md): the browser's or
UnifiedPush distributor's `{endpoint, keys: {p256dh, auth}}`, and the events wanted (default: all). It is
pushed to while the credential this socket said hello with works.
"""

from typing import Annotated

import msgspec

from handlers.ws.support.context import WsContext, rid
from handlers.ws.support.messages import ClientMessage
from pheby.protocol.frames import PushSubscribed
from pheby.push.subscriptions import PUSH_EVENTS, BrowserSubscription, PushEvent


class PushSubscribe(ClientMessage, frozen=True, tag="push.subscribe"):
    subscription: BrowserSubscription
    events: Annotated[list[PushEvent], msgspec.Meta(min_length=1, max_length=len(PUSH_EVENTS))] | None = None


async def handle(ctx: WsContext, msg: PushSubscribe) -> None:
    subscription = await ctx.services.push.subscribe(
        ctx.account.id, msg.subscription, msg.events, ctx.connection.token_id
    )
    ctx.reply(PushSubscribed(subscription=subscription, request_id=rid(msg.request_id)))

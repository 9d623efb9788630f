"""POST /api/push/subscriptions — keep a browser's Web Push subscription for the caller (201).

The same endpoint again updates the caller's subscription and keeps its id.
"""

from typing import Annotated

import msgspec
from litestar import post
from litestar.di import NamedDependency

from handlers.support.openapi import errors, json_body
from pheby.auth import Principal
from pheby.push.subscriptions import PUSH_EVENTS, BrowserSubscription, PushEvent, Subscription
from pheby.services import Services


class SubscribeRequest(BrowserSubscription, frozen=True, forbid_unknown_fields=True):
    """`PushSubscription.toJSON()`, and the events wanted (default: all)."""

    events: Annotated[list[PushEvent], msgspec.Meta(min_length=1, max_length=len(PUSH_EVENTS))] | None = None


class SubscriptionBody(msgspec.Struct, frozen=True):
    subscription: Subscription


EXAMPLE = {
    "endpoint": "https://push.example.net/send/abc123",
    "keys": {"p256dh": "BNc…", "auth": "tBH…"},
    "events": ["approval", "clarify"],
}


@post("/push/subscriptions", tags=["push"], status_code=201, responses=errors(400, 408, 409, 413))
async def create_push_subscription(
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
    data: Annotated[SubscribeRequest, json_body(SubscribeRequest, examples=[EXAMPLE])],
) -> SubscriptionBody:
    """400 for an endpoint that is not https on a public host, or keys that are not a P-256 point and a
    16-byte secret; 409 past 20 subscriptions. It is pushed to while the caller's credential works."""
    subscription = await services.push.subscribe(current_user.account.id, data, data.events, current_user.token_id)
    return SubscriptionBody(subscription=subscription)

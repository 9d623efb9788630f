"""GET /api/push/subscriptions — the caller's Web Push subscriptions (no keys, the endpoint's origin only)."""

import msgspec
from litestar import get
from litestar.di import NamedDependency

from pheby.auth import Principal
from pheby.push.subscriptions import Subscription
from pheby.services import Services


class SubscriptionList(msgspec.Struct, frozen=True):
    subscriptions: list[Subscription]


@get("/push/subscriptions", tags=["push"])
async def list_push_subscriptions(
    current_user: NamedDependency[Principal], services: NamedDependency[Services]
) -> SubscriptionList:
    return SubscriptionList(subscriptions=await services.push.subscriptions.of_account(current_user.account.id))

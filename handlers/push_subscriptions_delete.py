"""DELETE /api/push/subscriptions/{subscription_id} — stop pushing to one of the caller's subscriptions (204)."""

from litestar import delete
from litestar.di import NamedDependency
from litestar.params import FromPath

from handlers.support.openapi import errors
from pheby.auth import Principal
from pheby.errors import NotFound
from pheby.services import Services


@delete("/push/subscriptions/{subscription_id:str}", tags=["push"], status_code=204, responses=errors(404))
async def delete_push_subscription(
    current_user: NamedDependency[Principal], services: NamedDependency[Services], subscription_id: FromPath[str]
) -> None:
    if not await services.push.subscriptions.delete(current_user.account.id, subscription_id):
        raise NotFound("No such push subscription")

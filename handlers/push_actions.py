"""POST /api/push/actions — answer a decision from its notification's action button.

No other credential: the token is one, single use, bound to one account's decision and the action
it was offered for. A token that is used, expired, altered or given with another action is 404 and
changes nothing; failures are limited per address like logins (429).
"""

from typing import Annotated, Any

import msgspec
from litestar import Request, post
from litestar.di import NamedDependency

from handlers.support.openapi import errors, json_body
from pheby.errors import NotFound, RateLimited
from pheby.services import Services


class ActionRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    token: Annotated[str, msgspec.Meta(max_length=256)]
    action: Annotated[str, msgspec.Meta(max_length=64)]


class ActionAnswered(msgspec.Struct, frozen=True):
    ok: bool = True


@post("/api/push/actions", tags=["push"], status_code=200, responses=errors(400, 404, 408, 413, 429))
async def answer_push_action(
    request: Request[Any, Any, Any],
    data: Annotated[ActionRequest, json_body(ActionRequest)],
    services: NamedDependency[Services],
) -> ActionAnswered:
    address = services.authenticator.client_address(request)
    limiter = services.push_action_limiter
    if await limiter.is_locked(address):
        raise RateLimited(retry_after=await limiter.retry_after(address))
    try:
        await services.push.answer(data.token, data.action)
    except NotFound:
        await limiter.record_failure(address)
        raise
    return ActionAnswered()

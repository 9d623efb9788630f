"""GET /api/tasks — the account's scheduled tasks (its Hermes jobs, paused ones included)."""

from litestar import get
from litestar.di import NamedDependency

from handlers.support.openapi import errors
from pheby.auth import Principal
from pheby.hermes.tasks import TaskList
from pheby.services import Services


@get("/tasks", tags=["tasks"], responses=errors(501, 502))
async def list_tasks(current_user: NamedDependency[Principal], services: NamedDependency[Services]) -> TaskList:
    return TaskList(tasks=await services.tasks.listing(current_user.account))

"""POST /api/tasks — create a scheduled task (a Hermes job delivering locally), optionally paused."""

from typing import Annotated, Any

from litestar import post
from litestar.di import NamedDependency

from handlers.support.bodies import read_body
from handlers.support.openapi import errors, json_body
from pheby.auth import Principal
from pheby.hermes.tasks import CreateTask, TaskEnvelope
from pheby.services import Services

# A body Hermes takes: a schedule is a duration ("30m"), an interval ("every 2h"), a cron line or a timestamp.
EXAMPLE = {"name": "Morning brief", "schedule": "0 9 * * *", "prompt": "Summarise the news for me"}


@post("/tasks", tags=["tasks"], status_code=201, responses=errors(400, 408, 413, 422, 501, 502))
async def create_task(
    data: Annotated[dict[str, Any], json_body(CreateTask, examples=[EXAMPLE])],
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> TaskEnvelope:
    body = read_body(data, CreateTask)
    return TaskEnvelope(task=await services.tasks.create(current_user.account, body))

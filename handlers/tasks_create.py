"""POST /api/tasks — create a scheduled task (a Hermes job delivering locally), optionally paused."""

from typing import Any

from litestar import post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from handlers.bodies import read_body
from pheby.auth import Principal
from pheby.services import Services
from pheby.tasks import CreateTask, TaskEnvelope


@post("/tasks", tags=["tasks"], status_code=201)
async def create_task(
    data: JSONBody[dict[str, Any]], current_user: NamedDependency[Principal], services: NamedDependency[Services]
) -> TaskEnvelope:
    body = read_body(data, CreateTask)
    return TaskEnvelope(task=await services.tasks.create(current_user.account, body))

"""PATCH /api/tasks/{task_id} — change a task's name, schedule, prompt, repeat count or enabled state."""

from typing import Annotated, Any

from litestar import patch
from litestar.di import NamedDependency
from litestar.params import FromPath

from handlers.support.bodies import read_body
from handlers.support.openapi import errors, json_body
from pheby.auth import Principal
from pheby.hermes.tasks import TaskEnvelope, UpdateTask
from pheby.services import Services

EXAMPLE = {"schedule": "every 2h", "enabled": False}


@patch("/tasks/{task_id:str}", tags=["tasks"], responses=errors(400, 404, 408, 413, 422, 501, 502))
async def update_task(
    task_id: FromPath[str],
    data: Annotated[dict[str, Any], json_body(UpdateTask, min_properties=1, examples=[EXAMPLE])],
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> TaskEnvelope:
    body = read_body(data, UpdateTask)
    return TaskEnvelope(task=await services.tasks.update(current_user.account, task_id, body))

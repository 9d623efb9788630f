"""PATCH /api/tasks/{task_id} — change a task's name, schedule, prompt, repeat count or enabled state."""

from typing import Any

from litestar import patch
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody

from handlers.bodies import read_body
from pheby.auth import Principal
from pheby.services import Services
from pheby.tasks import TaskEnvelope, UpdateTask


@patch("/tasks/{task_id:str}", tags=["tasks"])
async def update_task(
    task_id: FromPath[str],
    data: JSONBody[dict[str, Any]],
    current_user: NamedDependency[Principal],
    services: NamedDependency[Services],
) -> TaskEnvelope:
    body = read_body(data, UpdateTask)
    return TaskEnvelope(task=await services.tasks.update(current_user.account, task_id, body))

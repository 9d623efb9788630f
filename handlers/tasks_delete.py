"""DELETE /api/tasks/{task_id} — delete a scheduled task (its Hermes job)."""

from litestar import delete
from litestar.di import NamedDependency
from litestar.params import FromPath

from handlers.support.openapi import errors
from pheby.auth import Principal
from pheby.services import Services


@delete("/tasks/{task_id:str}", tags=["tasks"], status_code=200, responses=errors(400, 404, 501, 502))
async def delete_task(
    task_id: FromPath[str], current_user: NamedDependency[Principal], services: NamedDependency[Services]
) -> dict[str, bool]:
    await services.tasks.delete(current_user.account, task_id)
    return {"ok": True}

"""POST /api/tasks/{task_id}/run — run a task now (Hermes runs the job; its output arrives through the job poller)."""

from litestar import post
from litestar.di import NamedDependency
from litestar.params import FromPath

from handlers.support.openapi import errors
from pheby.auth import Principal
from pheby.hermes.tasks import TaskEnvelope
from pheby.services import Services


@post("/tasks/{task_id:str}/run", tags=["tasks"], status_code=200, responses=errors(400, 404, 501, 502))
async def run_task(
    task_id: FromPath[str], current_user: NamedDependency[Principal], services: NamedDependency[Services]
) -> TaskEnvelope:
    return TaskEnvelope(task=await services.tasks.run(current_user.account, task_id))

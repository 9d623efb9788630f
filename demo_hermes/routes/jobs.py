"""``/api/jobs``: cron job CRUD, pause, resume and run-now, in the jobs routes' bare-string error envelope."""

from typing import Any, Final

from litestar import Request, Response, delete, get, patch, post
from litestar.params import FromPath, FromQuery

from demo_hermes.execution import execute_job
from demo_hermes.jobs import iso, utc_now
from demo_hermes.state import demo_state
from demo_hermes.wire import jobs_error, json_response, read_json

__all__ = ["JOB_ROUTES"]


def _job_body(job: dict[str, Any]) -> Response[bytes]:
    return json_response({"job": job})


@get("/api/jobs")
async def list_jobs(request: Request[Any, Any, Any], include_disabled: FromQuery[str | None] = None) -> Response[bytes]:
    include = (include_disabled or "").lower() in {"true", "1", "yes"}
    return json_response({"jobs": demo_state(request).jobs.listing(include_disabled=include)})


@post("/api/jobs", status_code=200)
async def create_job(request: Request[Any, Any, Any]) -> Response[bytes]:
    state = demo_state(request)
    body = await read_json(request, jobs_error(400, "Invalid JSON"))
    client = request.client.host if request.client else None
    origin = {
        "platform": "api_server",
        "chat_id": "api",
        "source_ip": client,
        "peer_ip": client,
        "user_agent": request.headers.get("user-agent"),
    }
    job = state.jobs.create(body, origin=origin, model=state.config.model, provider=state.config.provider)
    return _job_body(job)


@get("/api/jobs/{job_id:str}")
async def get_job(request: Request[Any, Any, Any], job_id: FromPath[str]) -> Response[bytes]:
    return _job_body(demo_state(request).jobs.get(job_id))


@patch("/api/jobs/{job_id:str}")
async def update_job(request: Request[Any, Any, Any], job_id: FromPath[str]) -> Response[bytes]:
    jobs = demo_state(request).jobs
    jobs.get(job_id)  # an unknown or malformed id is reported before a bad body, as in 0.19.0
    body = await read_json(request, jobs_error(400, "Invalid JSON"))
    return _job_body(jobs.update(job_id, body))


@delete("/api/jobs/{job_id:str}", status_code=200)
async def delete_job(request: Request[Any, Any, Any], job_id: FromPath[str]) -> Response[bytes]:
    demo_state(request).jobs.delete(job_id)
    return json_response({"ok": True})


@post("/api/jobs/{job_id:str}/pause", status_code=200)
async def pause_job(request: Request[Any, Any, Any], job_id: FromPath[str]) -> Response[bytes]:
    return _job_body(demo_state(request).jobs.pause(job_id))


@post("/api/jobs/{job_id:str}/resume", status_code=200)
async def resume_job(request: Request[Any, Any, Any], job_id: FromPath[str]) -> Response[bytes]:
    return _job_body(demo_state(request).jobs.resume(job_id))


@post("/api/jobs/{job_id:str}/run", status_code=200)
async def run_job(request: Request[Any, Any, Any], job_id: FromPath[str]) -> Response[bytes]:
    """Like 0.19.0 this only marks the job due and returns it; the demo then runs it at once."""
    state = demo_state(request)
    job = state.jobs.get(job_id)
    job["next_run_at"] = iso(utc_now())
    state.spawn(execute_job(state, job_id))
    return _job_body(job)


JOB_ROUTES: Final = [list_jobs, create_job, get_job, update_job, delete_job, pause_job, resume_job, run_job]

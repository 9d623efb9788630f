"""Playing the demo agent for a run (``POST /v1/runs``) and for a cron job execution."""

import asyncio
import logging
import os
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from demo_hermes.agent import AgentFailure, respond
from demo_hermes.jobs import iso, utc_now
from demo_hermes.newer import AgentInterrupted
from demo_hermes.runs import Run
from demo_hermes.schedule import next_run
from demo_hermes.state import DemoState
from demo_hermes.turn import Turn

__all__ = ["CRON_PREAMBLE", "RunInput", "execute_job", "run_cron_ticker", "start_run"]

logger = logging.getLogger(__name__)

# The preamble Hermes puts before a job's prompt in the cron session's user message.
CRON_PREAMBLE: Final = (
    "[IMPORTANT: You are running as a scheduled cron job. DELIVERY: Your final response will be automatically "
    "delivered to the user — do NOT use send_message or try to deliver the output yourself. Just produce your "
    "report/output as your final response and the system handles the rest. SILENT: If there is genuinely nothing "
    'new to report, respond with exactly "[SILENT]" (nothing else) to suppress delivery. Never combine [SILENT] '
    "with content — either report your findings normally, or say [SILENT] and nothing more.]"
)
PROCESS_STARTED: Final = int(time.time())


@dataclass(frozen=True)
class RunInput:
    """What a run hands the agent: the new user text, the raw ``input`` field, and the history size."""

    text: str
    raw_input: Any
    history_count: int


def _usage(input_text: str, history_count: int, output_tokens: int) -> dict[str, int]:
    input_tokens = len(input_text.split()) + 10 * history_count
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, "total_tokens": input_tokens + output_tokens}


def start_run(state: DemoState, run: Run, run_input: RunInput) -> None:
    run.task = state.spawn(_drive_run(state, run, run_input))


async def _drive_run(state: DemoState, run: Run, run_input: RunInput) -> None:
    settings = state.turn_settings(run)
    session = state.sessions.ensure(run.session_id, source="api_server", model=settings.model)
    state.sessions.add_message(session, "user", run_input.text)
    turn = Turn(
        text=run_input.text,
        raw_input=run_input.raw_input,
        history_count=run_input.history_count,
        settings=settings,
        sessions=state.sessions,
        session=session,
        run=run,
        holds=state.holds,
    )
    run.set_status("running")
    try:
        output = await respond(turn)
    except asyncio.CancelledError:
        # A stop cancels the task; ending the run cleanly is the whole point, so the cancel stops here.
        run.emit("run.cancelled", {})
        run.finish("cancelled")
        return
    except AgentFailure as exc:
        _fail(run, str(exc))
        return
    except AgentInterrupted as exc:
        run.error = str(exc)
        run.emit("run.interrupted", {"error": str(exc)})
        run.finish("interrupted")
        return
    except Exception:
        logger.exception("demo agent crashed in run %s", run.run_id)
        _fail(run, "internal error in the demo agent")
        return
    usage = _usage(run_input.text, run_input.history_count, turn.output_tokens)
    state.sessions.add_message(session, "assistant", output, finish_reason="stop")
    session.input_tokens += usage["input_tokens"]
    session.output_tokens += usage["output_tokens"]
    run.output, run.usage = output, usage
    run.emit("run.completed", {"output": output, "usage": usage})
    run.finish("completed")


def _fail(run: Run, error: str) -> None:
    run.error = error
    run.emit("run.failed", {"error": error})
    run.finish("failed")


async def execute_job(state: DemoState, job_id: str) -> None:
    """Run a job's prompt through the demo agent now, recording session ``cron_<id>_<YYYYMMDD_HHMMSS>``."""
    if job_id in state.running_jobs or job_id not in state.jobs.jobs:
        return
    state.running_jobs.add(job_id)
    try:
        await _execute_job(state, state.jobs.jobs[job_id])
    finally:
        state.running_jobs.discard(job_id)


async def _execute_job(state: DemoState, job: dict[str, Any]) -> None:
    started = utc_now()
    execution: dict[str, Any] = {
        "id": uuid.uuid4().hex,
        "job_id": job["id"],
        "source": "builtin",
        "process_id": f"{os.getpid()}:{PROCESS_STARTED}",
        "pid": os.getpid(),
        "process_started_at": PROCESS_STARTED,
        "status": "running",
        "claimed_at": iso(started),
        "started_at": iso(started),
        "finished_at": None,
        "error": None,
    }
    state.jobs.latest_execution[job["id"]] = execution
    repeat = job.get("repeat")
    if not isinstance(repeat, dict):
        # What 0.19.0's scheduler dies of after a PATCH with a bare-int "repeat".
        execution.update(status="failed", finished_at=iso(utc_now()), error="'int' object has no attribute 'get'")
        return

    settings = state.turn_settings()
    moment = started
    while f"cron_{job['id']}_{moment:%Y%m%d_%H%M%S}" in state.sessions.sessions:
        moment += timedelta(seconds=1)
    session = state.sessions.create(
        f"cron_{job['id']}_{moment:%Y%m%d_%H%M%S}",
        source="cron",
        model=settings.model,
        title=f"{job['name']} · {moment:%b %d %H:%M}",
        has_system_prompt=True,
    )
    state.sessions.add_message(session, "user", f"{CRON_PREAMBLE}\n\n{job['prompt']}")
    turn = Turn(
        text=job["prompt"],
        raw_input=job["prompt"],
        history_count=0,
        settings=settings,
        sessions=state.sessions,
        session=session,
        run=None,
        holds=state.holds,
    )
    error: str | None = None
    try:
        output = await respond(turn)
    except AgentFailure as exc:
        output, error = "", str(exc)
    finished = utc_now()
    if output:
        state.sessions.add_message(session, "assistant", output, finish_reason="stop")
    session.ended_at, session.end_reason = finished.timestamp(), "cron_complete"
    execution.update(status="failed" if error else "completed", finished_at=iso(finished), error=error)

    if job["id"] not in state.jobs.jobs:
        return  # deleted while it ran
    repeat["completed"] = int(repeat.get("completed") or 0) + 1
    job.update(last_run_at=iso(finished), last_status="error" if error else "ok", last_error=error)
    if repeat.get("times") is not None and repeat["completed"] >= repeat["times"]:
        state.jobs.delete(job["id"])  # Hermes removes a job once its repeats are used up
        return
    job["next_run_at"] = iso(next_run(job["schedule"], finished))


async def run_cron_ticker(state: DemoState) -> None:
    """The scheduler tick: start every enabled job whose ``next_run_at`` has come."""
    while True:
        await asyncio.sleep(state.options.cron_tick_seconds)
        for job in state.jobs.due(utc_now()):
            state.spawn(execute_job(state, job["id"]))

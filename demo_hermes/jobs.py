"""The demo's ``cron/jobs.json``: cron jobs in the 0.19.0 job-object shape, with its validation rules.

Errors are raised in the jobs routes' own envelope (``{"error": "<message>"}``), with 0.19.0's
statuses: 400 for validation, 404 for an unknown id, 500 for an unparsable schedule.
"""

import re
import uuid
from datetime import UTC, datetime
from typing import Any, Final

from demo_hermes.schedule import InvalidSchedule, ParsedSchedule, next_run, parse_schedule
from demo_hermes.wire import jobs_error

__all__ = ["JobStore", "iso", "utc_now"]

JOB_ID: Final = re.compile(r"^[a-f0-9]{12}$")
UPDATABLE_FIELDS: Final = ("name", "schedule", "prompt", "deliver", "skills", "skill", "repeat", "enabled")
MAX_NAME_CHARS: Final = 200
MAX_PROMPT_CHARS: Final = 5000


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _parse(text: str, now: datetime) -> ParsedSchedule:
    try:
        return parse_schedule(text, now)
    except InvalidSchedule as exc:
        raise jobs_error(500, str(exc)) from None


class JobStore:
    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.latest_execution: dict[str, dict[str, Any]] = {}

    def get(self, job_id: str) -> dict[str, Any]:
        if not JOB_ID.match(job_id):
            raise jobs_error(400, "Invalid job ID format")
        job = self.jobs.get(job_id)
        if job is None:
            raise jobs_error(404, "Job not found")
        return job

    def listing(self, *, include_disabled: bool) -> list[dict[str, Any]]:
        return [
            {**job, "latest_execution": self.latest_execution.get(job["id"])}
            for job in self.jobs.values()
            if include_disabled or job["enabled"]
        ]

    def create(self, body: Any, *, origin: dict[str, Any], model: str, provider: str) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise jobs_error(400, "Invalid JSON")
        name, schedule_text, prompt = body.get("name"), body.get("schedule"), body.get("prompt", "")
        if not isinstance(name, str) or not name.strip():
            raise jobs_error(400, "Name is required")
        if len(name) > MAX_NAME_CHARS:
            raise jobs_error(400, f"Name must be {MAX_NAME_CHARS} characters or less")
        if not isinstance(schedule_text, str) or not schedule_text.strip():
            raise jobs_error(400, "Schedule is required")
        if not isinstance(prompt, str) or len(prompt) > MAX_PROMPT_CHARS:
            raise jobs_error(400, f"Prompt must be a string of {MAX_PROMPT_CHARS} characters or less")
        repeat = body.get("repeat")
        if repeat is not None and (isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1):
            raise jobs_error(400, "Repeat must be a positive integer")
        skills = body.get("skills") or []
        now = utc_now()
        parsed = _parse(schedule_text, now)
        if repeat is None and parsed.one_shot:
            repeat = 1
        job_id = uuid.uuid4().hex[:12]
        job: dict[str, Any] = {
            "id": job_id,
            "name": name,
            "prompt": prompt,
            "skills": skills,
            "skill": skills[0] if skills else None,
            "model": None,
            "provider": None,
            "provider_snapshot": provider,
            "model_snapshot": model,
            "base_url": None,
            "script": None,
            "no_agent": False,
            "context_from": None,
            "schedule": parsed.schedule,
            "schedule_display": parsed.schedule["display"],
            "repeat": {"times": repeat, "completed": 0},
            "enabled": True,
            "state": "scheduled",
            "paused_at": None,
            "paused_reason": None,
            "created_at": iso(now),
            "next_run_at": iso(parsed.next_run_at),
            "last_run_at": None,
            "last_status": None,
            "last_error": None,
            "last_delivery_error": None,
            "deliver": body.get("deliver") or "local",
            "origin": origin,
            "enabled_toolsets": None,
            "workdir": None,
        }
        self.jobs[job_id] = job
        return job

    def update(self, job_id: str, body: Any) -> dict[str, Any]:
        job = self.get(job_id)
        changes = {key: body[key] for key in UPDATABLE_FIELDS if key in body} if isinstance(body, dict) else {}
        if not changes:
            raise jobs_error(400, "No valid fields to update")
        if "schedule" in changes:
            if not isinstance(changes["schedule"], str):
                raise jobs_error(400, "Schedule must be a string")
            parsed = _parse(changes["schedule"], utc_now())
            changes["schedule"] = parsed.schedule
            changes["schedule_display"] = parsed.schedule["display"]
            changes["next_run_at"] = iso(parsed.next_run_at)
        # 0.19.0 stores "repeat" exactly as sent, so a bare int corrupts the job; the demo keeps that bug.
        job.update(changes)
        return job

    def pause(self, job_id: str) -> dict[str, Any]:
        job = self.get(job_id)
        job.update(enabled=False, state="paused", paused_at=iso(utc_now()))
        return job

    def resume(self, job_id: str) -> dict[str, Any]:
        job = self.get(job_id)
        now = utc_now()
        job.update(enabled=True, state="scheduled", paused_at=None, paused_reason=None)
        if job["schedule"].get("kind") != "once":
            job["next_run_at"] = iso(next_run(job["schedule"], now))
        return job

    def delete(self, job_id: str) -> None:
        self.get(job_id)
        del self.jobs[job_id]
        self.latest_execution.pop(job_id, None)

    def due(self, now: datetime) -> list[dict[str, Any]]:
        return [
            job
            for job in self.jobs.values()
            if job["enabled"] and job["next_run_at"] and datetime.fromisoformat(job["next_run_at"]) <= now
        ]

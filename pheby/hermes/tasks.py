"""Scheduled tasks: the account's Hermes `/api/jobs`, one job per task, scoped to the account that made it.

There is no second scheduler: every operation goes straight to the gateway of the account (its own
Hermes settings, else the server's). A task is the whitelisted projection of a job (`Task`); the
gateway's values pass through with their own JSON types, and fields Hermes omits stay absent.

Scoping on a shared Hermes: an account sees and may act on only the jobs it created through this
server (`TaskOwners`); the owner account also sees the jobs created outside the server (those with no
recorded owner). Anything else is reported exactly like a job that does not exist.

Hermes 0.19.0 quirks handled here: an unparsable schedule is a 500 whose text starts "Invalid
schedule" (→ 422, as are its other schedule refusals); `PATCH {"repeat": N}` corrupts the job, so
`repeat` is always sent as `{"times": N, "completed": 0}`; `PATCH {"enabled": false}` does not pause,
so `enabled` goes through `/pause` and `/resume`.
"""

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Final, TypeVar

import msgspec
from msgspec import UNSET, Meta, UnsetType

import hermes_client as hc
from pheby.errors import (
    NotFound,
    NotImplementedByUpstream,
    Unavailable,
    Unprocessable,
)
from pheby.hermes.failures import hermes_failure
from pheby.hermes.pool import HermesClients
from pheby.store.accounts import Account
from pheby.store.task_owners import TaskOwners

log = logging.getLogger("pheby.hermes.tasks")

T = TypeVar("T")

TASK_ID: Final = re.compile(r"[0-9a-f]{12}")
NAME_MAX: Final = 200
SCHEDULE_MAX: Final = 200
PROMPT_MAX: Final = 5000

# How 0.19.0 words a schedule (or prompt) it refuses, when it answers 500 instead of 400.
_REFUSAL_PREFIXES: Final = (
    "Invalid schedule",
    "Invalid cron expression",
    "Invalid timestamp",
    "Invalid duration",
    "Requested one-shot time",
    "Cannot resume: one-shot time",
    "Blocked:",
)

Name = Annotated[str, Meta(min_length=1, max_length=NAME_MAX)]
Schedule = Annotated[str, Meta(min_length=1, max_length=SCHEDULE_MAX)]
Prompt = Annotated[str, Meta(min_length=1, max_length=PROMPT_MAX)]
Repeat = Annotated[int, Meta(ge=1)]


class Task(msgspec.Struct, frozen=True, kw_only=True):
    """The public projection of a Hermes job: exactly these fields, each absent when Hermes omits it."""

    id: str
    name: str | UnsetType = UNSET
    schedule: dict[str, Any] | UnsetType = UNSET
    prompt: str | UnsetType = UNSET
    enabled: bool | UnsetType = UNSET
    repeat: dict[str, Any] | int | UnsetType | None = UNSET
    created_at: str | UnsetType | None = UNSET
    last_run_at: str | UnsetType | None = UNSET
    next_run_at: str | UnsetType | None = UNSET


class TaskList(msgspec.Struct, frozen=True):
    tasks: list[Task]
    next_cursor: None = None


class TaskEnvelope(msgspec.Struct, frozen=True):
    task: Task


class CreateTask(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`POST /api/tasks`. Delivery is always local; nothing else of the job can be chosen."""

    name: Name
    schedule: Schedule
    prompt: Prompt
    repeat: Repeat | UnsetType = UNSET
    paused: bool = False


class UpdateTask(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`PATCH /api/tasks/{id}`: every field optional, at least one given."""

    name: Name | UnsetType = UNSET
    schedule: Schedule | UnsetType = UNSET
    prompt: Prompt | UnsetType = UNSET
    repeat: Repeat | UnsetType = UNSET
    enabled: bool | UnsetType = UNSET


def _builtins(value: Any) -> Any:
    return msgspec.to_builtins(value) if isinstance(value, msgspec.Struct) else value


def project(job: hc.Job) -> Task:
    """The whitelisted view of a job: no origin, delivery, model, provider or any other configuration."""
    return Task(
        id=job.id,
        name=job.name,
        schedule=_builtins(job.schedule),
        prompt=job.prompt,
        enabled=job.enabled,
        repeat=_builtins(job.repeat),
        created_at=job.created_at,
        last_run_at=job.last_run_at,
        next_run_at=job.next_run_at,
    )


def _is_active(job: hc.Job) -> bool:
    return job.enabled is True and job.state != "paused"


def _is_refusal(message: str) -> bool:
    return message.startswith(_REFUSAL_PREFIXES)


@contextmanager
def _hermes_errors(*, collection: bool) -> Iterator[None]:
    """Map Hermes failures onto the server's errors. `collection`: the call was on `/api/jobs` itself."""
    try:
        yield
    except hc.HermesUnavailable as exc:
        log.info("Hermes jobs API unavailable: %s", exc)
        raise hermes_failure(exc, unavailable=Unavailable.default_message) from exc
    except hc.HermesNotFound as exc:
        if collection:
            raise NotImplementedByUpstream("This Hermes has no scheduled-task API") from exc
        raise hermes_failure(exc, not_found="Task not found") from exc
    except hc.HermesRejected as exc:  # shown to the client: scrubbed like every Hermes error text
        if exc.code == "invalid_schedule" or exc.status in (400, 422) or _is_refusal(exc.message):
            raise hermes_failure(exc, refused="{text}", refused_as=Unprocessable) from exc
        if exc.status == 405:
            raise NotImplementedByUpstream("This Hermes has no scheduled-task API") from exc
        if exc.status == 429:
            raise hermes_failure(exc, busy="Hermes is busy; try again later") from exc
        log.warning("Hermes refused a jobs request (HTTP %s): %s", exc.status, exc.message)
        raise hermes_failure(exc) from exc
    except hc.HermesUpstreamError as exc:
        if exc.status == 501:
            raise NotImplementedByUpstream("This Hermes has no scheduled-task API") from exc
        if exc.status == 500 and _is_refusal(exc.message):  # the jobs API answers some refusals with 500
            raise hermes_failure(exc, refused="{text}", refused_as=Unprocessable, refusal=True) from exc
        log.warning("Hermes jobs API failed (HTTP %s): %s", exc.status, exc.message)
        raise hermes_failure(exc) from exc


class Tasks:
    """Scheduled-task operations for one account at a time, on that account's Hermes."""

    def __init__(self, hermes: HermesClients, owners: TaskOwners) -> None:
        self._hermes = hermes
        self._owners = owners

    async def _visible(self, account: Account, hermes_url: str, job_id: str) -> bool:
        owner = await self._owners.owner(hermes_url, job_id)
        return owner == account.id or (owner is None and account.is_owner)

    async def _resolve(self, account: Account, task_id: str) -> tuple[hc.HermesClient, str]:
        """The client and Hermes URL for a task the account may act on; 404 (without asking Hermes) otherwise."""
        if not TASK_ID.fullmatch(task_id):
            raise NotFound("Task not found")
        hermes_url = self._hermes.url_for(account)
        if not await self._visible(account, hermes_url, task_id):
            raise NotFound("Task not found")
        return self._hermes.for_account(account), hermes_url

    async def listing(self, account: Account) -> list[Task]:
        hermes_url = self._hermes.url_for(account)
        client = self._hermes.for_account(account)
        with _hermes_errors(collection=True):
            jobs = await client.list_jobs(include_disabled=True)
        if account.is_owner:
            return [project(job) for job in jobs if await self._visible(account, hermes_url, job.id)]
        owned = await self._owners.owned_by(hermes_url, account.id)
        return [project(job) for job in jobs if job.id in owned]

    async def create(self, account: Account, body: CreateTask) -> Task:
        hermes_url = self._hermes.url_for(account)
        client = self._hermes.for_account(account)
        repeat = None if isinstance(body.repeat, UnsetType) else body.repeat
        with _hermes_errors(collection=True):
            job = await client.create_job(body.name, body.schedule, body.prompt, repeat=repeat, deliver="local")
        await self._owners.record(hermes_url, job.id, account.id)
        if body.paused:
            try:
                with _hermes_errors(collection=False):
                    job = await client.pause_job(job.id)
            except Exception:
                # A task asked for paused must not stay scheduled: take it back out, then report the failure.
                await self._discard(client, hermes_url, job.id)
                raise
        return project(job)

    async def update(self, account: Account, task_id: str, body: UpdateTask) -> Task:
        client, _ = await self._resolve(account, task_id)
        fields: dict[str, Any] = {}
        for name in ("name", "schedule", "prompt"):
            value = getattr(body, name)
            if not isinstance(value, UnsetType):
                fields[name] = value
        if not isinstance(body.repeat, UnsetType):
            fields["repeat"] = {"times": body.repeat, "completed": 0}  # never a bare int (0.19.0 corrupts the job)
        if not fields and isinstance(body.enabled, UnsetType):
            raise Unprocessable("Nothing to update")
        with _hermes_errors(collection=False):
            job = await client.update_job(task_id, **fields) if fields else await client.get_job(task_id)
            if not isinstance(body.enabled, UnsetType) and body.enabled != _is_active(job):
                job = await (client.resume_job(task_id) if body.enabled else client.pause_job(task_id))
        return project(job)

    async def delete(self, account: Account, task_id: str) -> None:
        client, hermes_url = await self._resolve(account, task_id)
        try:
            with _hermes_errors(collection=False):
                await client.delete_job(task_id)
        except NotFound:
            await self._owners.forget(hermes_url, task_id)  # deleted outside the server meanwhile
            raise
        await self._owners.forget(hermes_url, task_id)

    async def pause(self, account: Account, task_id: str) -> Task:
        client, _ = await self._resolve(account, task_id)
        with _hermes_errors(collection=False):
            return project(await client.pause_job(task_id))

    async def resume(self, account: Account, task_id: str) -> Task:
        client, _ = await self._resolve(account, task_id)
        with _hermes_errors(collection=False):
            return project(await client.resume_job(task_id))

    async def run(self, account: Account, task_id: str) -> Task:
        """Ask Hermes to run the job now; its output reaches the account later through the job poller."""
        client, _ = await self._resolve(account, task_id)
        with _hermes_errors(collection=False):
            return project(await client.run_job(task_id))

    async def _discard(self, client: hc.HermesClient, hermes_url: str, job_id: str) -> None:
        try:
            await client.delete_job(job_id)
        except hc.HermesNotFound:
            pass
        except hc.HermesError as exc:
            log.warning("could not remove job %s after a failed pause: %s", job_id, exc)
            return  # keep the owner record: the job still exists and stays the account's
        await self._owners.forget(hermes_url, job_id)

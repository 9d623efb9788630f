"""The APScheduler jobs of the server process: Hermes job polling, attachment expiry, the blob sweep, and
(with Redis) the event log's retention.

`running_scheduler` is entered in the app lifespan. Exactly one server runs the jobs at a time:
- on SQLite, the one holding a lock file in the data dir (a second worker or an overlapping deploy on the
  same data runs none);
- on PostgreSQL, the one holding the database's `scheduler` lease (`pheby.process_lease.ProcessLease`):
  every server starts its scheduler paused and follows the lease, renewing it while it runs the jobs and
  taking it once it is free or expired. A holder that can't renew in time pauses before its lease runs
  out, so two never run at once; one killed is replaced within the lease.
"""

import asyncio
import fcntl
import logging
import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.schedulers.base import STATE_PAUSED

from pheby.cancelling import cancel_and_wait
from pheby.process_lease import SCHEDULER, ProcessLease, own_holder
from pheby.services import Services
from scheduler.attachment_expiry import expire_attachments
from scheduler.blob_sweep import sweep_blobs
from scheduler.event_retention import prune_events
from scheduler.job_poller import poll_cron_sessions

log = logging.getLogger("pheby.scheduler")

JOB_DEFAULTS = {"coalesce": True, "max_instances": 1, "misfire_grace_time": 60}
EVENT_PRUNE_MINUTES = 10
LEASE_SECONDS = 15.0  # the scheduler lease lasts this long unless renewed
RENEW_SECONDS = 5.0  # its holder renews it (and the others try to take it) this often


@asynccontextmanager
async def running_scheduler(services: Services) -> AsyncIterator[AsyncIOScheduler | None]:
    """The scheduler with the server's jobs, run while this server is the single runner; stopped after.
    None on SQLite when another process on this data dir already runs one."""
    if services.db.engine == "postgresql":
        async with _leased(services) as scheduler:
            yield scheduler
        return
    lock_path = services.settings.data_dir / "scheduler.lock"
    lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock_fd)
        log.warning("another server process runs the scheduler for this data dir; not starting a second one")
        yield None
        return
    scheduler = _with_jobs(services)
    scheduler.start()
    try:
        yield scheduler
    finally:
        scheduler.shutdown(wait=False)
        fcntl.flock(lock_fd, fcntl.LOCK_UN)
        os.close(lock_fd)


@asynccontextmanager
async def _leased(services: Services) -> AsyncIterator[AsyncIOScheduler]:
    scheduler = _with_jobs(services)
    scheduler.start(paused=True)
    # One holder per server: two servers of one process (as tests run them) don't share the runner.
    lease = ProcessLease(services.db, SCHEDULER, holder=f"{own_holder()}:{secrets.token_hex(4)}", seconds=LEASE_SECONDS)
    following = asyncio.create_task(_follow(scheduler, lease), name="scheduler-lease")
    try:
        yield scheduler
    finally:
        await cancel_and_wait(following)
        scheduler.shutdown(wait=False)
        await lease.release()


async def _follow(scheduler: AsyncIOScheduler, lease: ProcessLease) -> None:
    """Run the jobs while holding the lease: renew it, or try to take it, every `RENEW_SECONDS`."""
    loop = asyncio.get_running_loop()
    held_until = 0.0  # loop time the lease is surely held until (a margin of one renewal before its expiry)
    while True:
        asked = loop.time()  # the expiry written is no earlier than this plus the lease
        try:
            holding = await (lease.renew() if held_until else _taken(lease))
        except Exception as exc:  # noqa: BLE001 - the database away a moment: tried again next time
            log.warning("the scheduler lease could not be renewed or taken (%s)", type(exc).__name__)
        else:
            held_until = asked + LEASE_SECONDS - RENEW_SECONDS if holding else 0.0
        running = scheduler.state != STATE_PAUSED
        if held_until and loop.time() < held_until:
            if not running:
                log.info("this server runs the scheduler")
                scheduler.resume()
        else:
            held_until = 0.0
            if running:
                log.warning("the scheduler lease is lost; another server runs the jobs")
                scheduler.pause()
        await asyncio.sleep(RENEW_SECONDS)


async def _taken(lease: ProcessLease) -> bool:
    return await lease.try_take() is None


def _with_jobs(services: Services) -> AsyncIOScheduler:
    scheduler = AsyncIOScheduler(timezone="UTC", job_defaults=JOB_DEFAULTS)
    if services.settings.job_polling:
        scheduler.add_job(
            poll_cron_sessions,
            "interval",
            seconds=services.settings.job_poll_seconds,
            args=[services],
            id="poll-cron-sessions",
            replace_existing=True,
        )
    scheduler.add_job(
        expire_attachments, "interval", hours=1, args=[services], id="expire-attachments", replace_existing=True
    )
    scheduler.add_job(
        sweep_blobs,
        "interval",
        hours=1,
        next_run_time=datetime.now(UTC),  # and once at start-up: a crash may have left leftovers
        args=[services],
        id="sweep-blobs",
        replace_existing=True,
    )
    if services.event_log is not None:
        scheduler.add_job(
            prune_events,
            "interval",
            minutes=EVENT_PRUNE_MINUTES,
            next_run_time=datetime.now(UTC),  # and at start-up: the log's size is known from the start
            args=[services],
            id="prune-events",
            replace_existing=True,
        )
    return scheduler

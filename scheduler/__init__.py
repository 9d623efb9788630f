"""The APScheduler jobs of the server process: Hermes job polling, attachment expiry, the blob sweep, and
(with Redis) the event log's retention.

`running_scheduler` is entered in the app lifespan. A lock file in the data dir keeps a second
server process on the same data (a second worker, an overlapping deploy) from running the jobs
twice: only the holder of the lock schedules anything.
"""

import fcntl
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from pheby.services import Services
from scheduler.attachment_expiry import expire_attachments
from scheduler.blob_sweep import sweep_blobs
from scheduler.event_retention import prune_events
from scheduler.job_poller import poll_cron_sessions

log = logging.getLogger("pheby.scheduler")

JOB_DEFAULTS = {"coalesce": True, "max_instances": 1, "misfire_grace_time": 60}
EVENT_PRUNE_MINUTES = 10


@asynccontextmanager
async def running_scheduler(services: Services) -> AsyncIterator[AsyncIOScheduler | None]:
    """Start the scheduler (None when another process on this data dir already runs one); stop it after."""
    lock_path = services.settings.data_dir / "scheduler.lock"
    lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock_fd)
        log.warning("another server process runs the scheduler for this data dir; not starting a second one")
        yield None
        return
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
    scheduler.start()
    try:
        yield scheduler
    finally:
        scheduler.shutdown(wait=False)
        fcntl.flock(lock_fd, fcntl.LOCK_UN)
        os.close(lock_fd)

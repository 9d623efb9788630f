"""Checks `pheby serve` runs before it serves: refuse early on what can't heal, warn on what may.

- HERMES_URL must be set: production has no demo Hermes (that is `make run` / `local_dev.py`).
- The data dir must be writable (SQLite, the generated secret, local blobs live there).
- With PHEBY_DATABASE_URL, PostgreSQL must be reachable (its migrations are applied then) and served by no
  other live process (`pheby.process_lease`).
- With PHEBY_STORAGE=s3 the bucket must be reachable (`head_bucket` through `S3Store`'s client).
- Hermes should answer `GET /health`; if it doesn't, that is only a warning: it may come up later,
  and runs fail with `Unavailable` until it does.

The storage and Hermes checks are `pheby.readiness`'s probes, the ones `GET /readyz` runs.

A refusal is a `StartupRefused` whose message is one line for the operator; every check is logged.
"""

import logging
import os
import tempfile
from pathlib import Path

from pheby.errors import DatabaseUnavailable
from pheby.process_lease import ServerLease
from pheby.readiness import ProbeFailed, hermes_health, storage_problem
from pheby.settings import Settings

log = logging.getLogger("pheby.startup")

HERMES_TIMEOUT_SECONDS = 5.0
BUCKET_TIMEOUT_SECONDS = 15.0  # boto retries a refused connection a few times before it gives up


class StartupRefused(Exception):
    """The server must not start; the message is one line telling the operator why."""


async def run_startup_checks(settings: Settings) -> list[str]:
    """Run every check in order; the warnings (possibly none). Raises `StartupRefused`."""
    check_hermes_configured(settings)
    check_data_dir(settings.data_dir)
    if settings.database_url:
        await check_database(settings)
    if settings.storage == "s3":
        await check_bucket(settings)
    warnings: list[str] = []
    hermes_warning = await check_hermes(settings)
    if hermes_warning is not None:
        warnings.append(hermes_warning)
    return warnings


def check_hermes_configured(settings: Settings) -> None:
    if not settings.hermes_url:
        raise StartupRefused(
            "HERMES_URL is not set: point it at the Hermes gateway's API server "
            "(or use `make run` / `python local_dev.py` for the demo Hermes)"
        )


async def check_database(settings: Settings) -> None:
    """PostgreSQL answers, is migrated, and no live `pheby serve` this one can't serve beside holds it."""
    db = settings.open_database()
    try:
        await db.open()
        other = await ServerLease(db, shared=bool(settings.redis_url)).holder_elsewhere()
    except DatabaseUnavailable:
        raise StartupRefused(
            "PHEBY_DATABASE_URL: PostgreSQL is not reachable (is it running? is the URL right?)"
        ) from None
    finally:
        await db.close()
    if other is not None:
        raise StartupRefused(f"PHEBY_DATABASE_URL: {other}")
    log.info("PostgreSQL is reachable and served by no process in this one's way")


def check_data_dir(data_dir: Path) -> None:
    """The data dir exists (created if need be) and a file can be written and removed in it."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=data_dir)
        try:
            os.write(fd, b"ok")
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise StartupRefused(f"PHEBY_DATA_DIR: {data_dir} is not writable ({reason})") from None
    log.info("data dir %s is writable", data_dir)


async def check_bucket(settings: Settings) -> None:
    """HEAD the bucket with the same client configuration the server will use."""
    from storage.s3 import S3Store  # boto3 is imported where S3 is used

    store = S3Store(settings.s3_bucket, prefix=settings.s3_prefix, endpoint_url=settings.s3_endpoint_url or None)
    try:
        problem = await storage_problem(store, BUCKET_TIMEOUT_SECONDS)
    finally:
        await store.aclose()
    if problem is not None:
        raise StartupRefused(f"PHEBY_S3_BUCKET: bucket {settings.s3_bucket!r} is not reachable ({problem})")
    log.info("S3 bucket %s is reachable", settings.s3_bucket)


async def check_hermes(settings: Settings) -> str | None:
    """A warning if Hermes does not answer `GET /health` now, else None."""
    try:
        health = await hermes_health(settings.hermes_url, settings.hermes_api_key, HERMES_TIMEOUT_SECONDS)
    except ProbeFailed as exc:
        warning = f"Hermes at {settings.hermes_url} is not reachable yet ({exc}); runs fail until it is"
        log.warning("%s", warning)
        return warning
    log.info("Hermes at %s is up (status %s, version %s)", settings.hermes_url, health.status, health.version or "?")
    return None

"""Readiness probes: can the server do its work right now? Storage, the server's Hermes, the database.

`GET /readyz` runs all three (load balancers take a 503 as "send no traffic here"); `pheby serve`'s
start-up checks use the storage and Hermes probes. Each probe is bounded by a short timeout and
answers None (up) or a short reason (down) for the log; none raises.
"""

import asyncio
import logging
from collections.abc import Awaitable
from typing import Final, Literal

import hermes_client as hc
from pheby.db import Database
from storage import BlobStore, StorageError

log = logging.getLogger("pheby.readiness")

PROBE_SECONDS = 3.0


async def _bounded(probe: Awaitable[object], seconds: float) -> str | None:
    try:
        async with asyncio.timeout(seconds):
            await probe
    except TimeoutError:
        return f"no answer within {seconds:g} s"
    return None


async def storage_problem(blobs: BlobStore, seconds: float = PROBE_SECONDS) -> str | None:
    """Why the blob store can't be read and written now, or None."""
    try:
        return await _bounded(blobs.check(), seconds)
    except StorageError as exc:
        return str(exc) or type(exc).__name__


class ProbeFailed(Exception):
    """A probe's target is down; the message is the short reason."""


async def hermes_health(url: str, api_key: str, seconds: float = PROBE_SECONDS) -> hc.Health:
    """`GET /health` of the Hermes at `url`, bounded; raises ProbeFailed."""
    if not url:
        raise ProbeFailed("HERMES_URL is not set")
    try:
        async with (
            asyncio.timeout(seconds),
            hc.HermesClient(url, api_key, connect_timeout=seconds, request_timeout=seconds) as client,
        ):
            return await client.health()
    except TimeoutError:
        raise ProbeFailed(f"no answer within {seconds:g} s") from None
    except hc.HermesError as exc:
        raise ProbeFailed(str(exc) or type(exc).__name__) from None


async def hermes_problem(url: str, api_key: str, seconds: float = PROBE_SECONDS) -> str | None:
    """Why the Hermes at `url` does not answer `GET /health` now, or None."""
    try:
        await hermes_health(url, api_key, seconds)
    except ProbeFailed as exc:
        return str(exc)
    return None


async def database_problem(db: Database, seconds: float = PROBE_SECONDS) -> str | None:
    """Why the database does not answer a query now, or None."""
    try:
        return await _bounded(db.run(lambda c: c.execute("SELECT 1").fetchone()), seconds)
    except Exception as exc:  # noqa: BLE001 - whatever SQLite says, the answer is "down"
        return type(exc).__name__


Component = Literal["storage", "hermes", "database"]
COMPONENTS: Final[tuple[Component, ...]] = ("storage", "hermes", "database")


async def down(blobs: BlobStore, db: Database, hermes_url: str, hermes_api_key: str) -> list[Component]:
    """The names of what is not reachable now (`storage`, `hermes`, `database`), probed concurrently."""
    problems = await asyncio.gather(
        storage_problem(blobs), hermes_problem(hermes_url, hermes_api_key), database_problem(db)
    )
    names: list[Component] = []
    for name, problem in zip(COMPONENTS, problems, strict=True):
        if problem:
            log.warning("not ready: %s is down (%s)", name, problem)
            names.append(name)
    return names

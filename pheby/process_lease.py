"""Leases of a PostgreSQL database's `process_leases` rows: the server processes, the one scheduler.

A process serves a database alone, or beside others when they share Redis (`PHEBY_REDIS_URL`): those
share their accounts' events (`pheby.cluster`) and their runs (`pheby.runs.leases`, `pheby.run_owners`),
and each holds a row `server:<holder>`; one without Redis holds the row `server` and must be alone. Each
names its holder (host, pid and a random part) and an expiry the holder renews every `RENEW_SECONDS`
(servers run side by side in one process, as tests do, share it). A process that can't join is refused at
start with one line naming the holder in its way and what is missing. A holder that stops releases its lease
at once; one that died is replaced once its lease expires (`LEASE_SECONDS`), or at once by a process on the
same host that finds its pid gone (a restart after kill -9).

The scheduler's single runner holds the row `scheduler` the same way (`ProcessLease`), one per server
(two servers of one process don't share it): the others wait, and take it once it is released or
expired (`scheduler.running_scheduler`).

SQLite needs none: its database lives in one data dir that one operator starts one server on.
"""

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from typing import Final

from pheby.db import Connection, Database
from pheby.errors import DatabaseUnavailable

log = logging.getLogger("pheby.lease")

SERVER: Final = "server"
SCHEDULER: Final = "scheduler"
LEASE_SECONDS: Final = 15.0
RENEW_SECONDS: Final = 5.0


class LeaseHeld(Exception):
    """Another live process holds the lease; the message is one line for the operator."""


# Drawn once per process: the holder is this process (servers it runs side by side share it), and a later
# process that happens to get the same pid is not taken for it.
_PROCESS_TOKEN: Final = secrets.token_hex(4)


def own_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{_PROCESS_TOKEN}"


def holder_gone(holder: str) -> bool:
    """Whether `holder` names a process of this host that no longer exists: its pid is gone, or is this
    process's while the holder's random part is not (a restart that got the same pid, as pid 1 in a
    container does)."""
    host, _, rest = holder.partition(":")
    pid, _, token = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    if int(pid) == os.getpid():
        return token.partition(":")[0] != _PROCESS_TOKEN
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, someone else's
        return False
    return False


def held_elsewhere(holder: str, *, shared: bool, theirs_shared: bool) -> str:
    """What an operator is told when `holder` serves the database in a way this process can't join."""
    host, _, rest = holder.partition(":")
    who = f"another server process (pid {rest.partition(':')[0]} on {host}) serves this database"
    if theirs_shared:
        return f"{who} with PHEBY_REDIS_URL: set the same PHEBY_REDIS_URL here to serve it beside it"
    if shared:
        return f"{who} without PHEBY_REDIS_URL: stop it, or give it the same PHEBY_REDIS_URL, first"
    return (
        f"{who}: stop it first, or give both the same PHEBY_REDIS_URL to serve it together "
        "(or give this one a database of its own)"
    )


class ProcessLease:
    """Take, renew and release the lease `name` of a database; `seconds` it lasts unless renewed."""

    def __init__(
        self,
        db: Database,
        name: str,
        *,
        clock: Callable[[], float] = time.time,
        holder: str | None = None,
        seconds: float = LEASE_SECONDS,
    ) -> None:
        self._db = db
        self._clock = clock
        self.name = name
        self.holder = holder or own_holder()
        self.seconds = seconds

    def _in_the_way(self, conn: Connection, now: float) -> str | None:
        """The live holder of the lease other than this one, if there is one."""
        row = conn.execute("SELECT holder, expires_at FROM process_leases WHERE name = ?", (self.name,)).fetchone()
        if row is None or row[0] == self.holder or row[1] <= now or holder_gone(row[0]):
            return None
        return str(row[0])

    async def try_take(self) -> str | None:
        """Hold the lease from now on, unless a live holder stands in the way: then what `_in_the_way` says
        of it (the holder)."""
        now = self._clock()

        def q(conn: Connection) -> str | None:
            if (other := self._in_the_way(conn, now)) is not None:
                return other
            conn.execute(
                "INSERT INTO process_leases (name, holder, expires_at) VALUES (?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at",
                (self.name, self.holder, now + self.seconds),
            )
            return None

        return await self._db.transaction(q)

    async def renew(self) -> bool:
        """Move the expiry on; False if the lease is another process's now (this one was paused past the
        expiry and another took it)."""
        expires_at = self._clock() + self.seconds
        # Taken again if it is free (another server of this process released it).
        changed = await self._db.run(
            lambda c: (
                c.execute(
                    "INSERT INTO process_leases (name, holder, expires_at) VALUES (?, ?, ?) "
                    "ON CONFLICT (name) DO UPDATE SET expires_at = excluded.expires_at "
                    "WHERE process_leases.holder = excluded.holder",
                    (self.name, self.holder, expires_at),
                ).rowcount
            )
        )
        return changed == 1

    async def release(self) -> None:
        """Give the lease up (at shutdown). With the database away, it lapses by itself within `seconds`."""
        try:
            await self._db.run(
                lambda c: c.execute(
                    "DELETE FROM process_leases WHERE name = ? AND holder = ?", (self.name, self.holder)
                )
            )
        except DatabaseUnavailable:
            log.warning("the %s lease could not be given up (the database is unavailable); it lapses", self.name)


class ServerLease(ProcessLease):
    """This process serves the database: alone (the row `server`), or `shared` with the processes that have
    the same Redis (each its row `server:<holder>`)."""

    def __init__(
        self,
        db: Database,
        *,
        shared: bool = False,
        clock: Callable[[], float] = time.time,
        holder: str | None = None,
    ) -> None:
        holder = holder or own_holder()
        super().__init__(db, f"{SERVER}:{holder}" if shared else SERVER, clock=clock, holder=holder)
        self.shared = shared

    def _in_the_way(self, conn: Connection, now: float) -> str | None:
        """What the operator is told about a live holder this process can't serve beside, if there is one."""
        rows = conn.execute(
            "SELECT name, holder, expires_at FROM process_leases WHERE name = ? OR name LIKE ?",
            (SERVER, f"{SERVER}:%"),
        ).fetchall()
        for name, holder, expires_at in rows:
            if holder == self.holder or expires_at <= now or holder_gone(holder):
                continue
            theirs_shared = name != SERVER
            if not (self.shared and theirs_shared):
                return held_elsewhere(holder, shared=self.shared, theirs_shared=theirs_shared)
        return None

    async def holder_elsewhere(self) -> str | None:
        """What the operator is told about a live holder this process can't serve beside, if there is one."""
        now = self._clock()
        return await self._db.run(lambda c: self._in_the_way(c, now))

    async def take(self) -> None:
        """Hold the lease from now on. Raises `LeaseHeld` while a live process this one can't serve beside
        holds one."""
        other = await self.try_take()
        if other is not None:
            raise LeaseHeld(other)

    async def hold(self) -> None:
        """Renew every `RENEW_SECONDS` until cancelled; a failed renewal is logged and tried again."""
        while True:
            await asyncio.sleep(RENEW_SECONDS)
            try:
                if not await self.renew():
                    log.error("the server lease of this database was taken by another process")
            except Exception as exc:  # noqa: BLE001 - the database away a moment: the next renewal again
                log.warning("renewing the server lease failed (%s); trying again", type(exc).__name__)

"""Leases of a PostgreSQL database's `process_leases` rows: the one server process, the one scheduler.

The processes of one deployment don't share their runs yet (with Redis they share their accounts' events,
`pheby.cluster`): each holds its runs' readers, so a client of a second `pheby serve` on the same database
would see none of the first one's runs in a snapshot. Until they do, a database is served by one
process, and the `process_leases` row `server` says which: its holder (host, pid and a random part) and
an expiry the holder renews every `RENEW_SECONDS` (servers run side by side in one process, as tests do,
share it). A second process is refused at start with one line naming the holder. A holder that stops
releases the lease at once; one that died is replaced once its lease expires (`LEASE_SECONDS`), or at
once by a process on the same host that finds its pid gone (a restart after kill -9).

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


def held_elsewhere(holder: str) -> str:
    """What an operator is told when `holder` serves the database already."""
    host, _, rest = holder.partition(":")
    return (
        f"another server process (pid {rest.partition(':')[0]} on {host}) serves this database, and the processes "
        "of one database can't share their runs yet: stop it first, or give this one a database of its own"
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

    def _other_holder(self, conn: Connection, now: float) -> str | None:
        """The live holder of the lease other than this one, if there is one."""
        row = conn.execute("SELECT holder, expires_at FROM process_leases WHERE name = ?", (self.name,)).fetchone()
        if row is None or row[0] == self.holder or row[1] <= now or holder_gone(row[0]):
            return None
        return str(row[0])

    async def try_take(self) -> str | None:
        """Hold the lease from now on, unless another live holder has it: then that holder."""
        now = self._clock()

        def q(conn: Connection) -> str | None:
            if (other := self._other_holder(conn, now)) is not None:
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
    """The `server` lease: this process serves the database."""

    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time, holder: str | None = None) -> None:
        super().__init__(db, SERVER, clock=clock, holder=holder)

    async def holder_elsewhere(self) -> str | None:
        """What the operator is told about the live holder other than this process, if there is one."""
        now = self._clock()
        other = await self._db.run(lambda c: self._other_holder(c, now))
        return None if other is None else held_elsewhere(other)

    async def take(self) -> None:
        """Hold the lease from now on. Raises `LeaseHeld` while another live process holds it."""
        other = await self.try_take()
        if other is not None:
            raise LeaseHeld(held_elsewhere(other))

    async def hold(self) -> None:
        """Renew every `RENEW_SECONDS` until cancelled; a failed renewal is logged and tried again."""
        while True:
            await asyncio.sleep(RENEW_SECONDS)
            try:
                if not await self.renew():
                    log.error("the server lease of this database was taken by another process")
            except Exception as exc:  # noqa: BLE001 - the database away a moment: the next renewal again
                log.warning("renewing the server lease failed (%s); trying again", type(exc).__name__)

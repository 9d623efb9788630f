"""Run leases: each run under way has one owner, the process reading its stream, fenced by an epoch.

A run's journal row (`active_runs`) names its owner, an epoch and an expiry. The process that starts a
run holds it from its reservation (epoch 1, `RunJournal.reserved`) and renews the expiry of all its runs
in one statement every `renew_every` seconds (`renew`). Its journal writes land only where the row still
names it and that epoch, so an owner paused past its expiry (SIGSTOP, a stalled machine) whose runs were
taken over meanwhile writes nothing more. Another process takes over a run whose lease ran out, or whose
owner on this host is gone (a restart after kill -9), by raising the epoch where it is still the one it
read (`claim`): one process wins.

The owner checks itself before it acts on a run (`RunManager`): it knows it holds its runs until
`valid_until`, its last renewal's start plus two thirds of the lease (the last third is for clocks that
disagree). Past that it asks the database (`confirm`) before going on, so a paused owner resumes into a
check, not into a write.
"""

import asyncio
import math
import secrets
import socket
import time
from collections.abc import Callable
from typing import Final, NamedTuple

from pheby.cancelling import shielded
from pheby.db import Connection, Database
from pheby.errors import DatabaseUnavailable
from pheby.process_lease import holder_gone, own_holder

LEASE_SECONDS: Final = 15.0
CONFIRM_RETRY_SECONDS: Final = 1.0  # the database away: how often an owner asks again whether it still holds


class LeftRun(NamedTuple):
    """A run another process may take over: its id, its owner and epoch as read."""

    run_id: str
    owner: str
    epoch: int
    owner_gone: bool  # the owner is a process of this host that no longer exists: no need to wait for the expiry


class RunLeases:
    """This process's leases on its runs' journal rows."""

    def __init__(
        self,
        db: Database,
        *,
        seconds: float = LEASE_SECONDS,
        holder: str | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = db
        self._clock = clock
        self._monotonic = monotonic
        # One holder per server (tests run several in one process), with the process's host and pid first.
        self.holder = holder or f"{own_holder()}:{secrets.token_hex(3)}"
        self.seconds = seconds
        self.renew_every = seconds / 3
        self._valid_until = -math.inf  # nothing confirmed yet: the first check asks the database
        self._renewal: asyncio.Task[dict[str, int]] | None = None

    def expiry(self) -> float:
        """The expiry a write taking or renewing a lease now gives it."""
        return self._clock() + self.seconds

    def valid(self) -> bool:
        """Whether this process surely still holds every run its last renewal returned."""
        return self._monotonic() < self._valid_until

    async def renew(self) -> dict[str, int]:
        """Move the expiry of every run this process owns on; those runs, with their epochs. One renewal at a
        time: a call while one is under way gets its answer."""
        if self._renewal is None or self._renewal.done():
            self._renewal = asyncio.create_task(self._renew(), name="run-lease-renewal")
        return await shielded(self._renewal)  # its callers may all be cancelled before it fails

    async def _renew(self) -> dict[str, int]:
        began, expires_at = self._monotonic(), self.expiry()
        rows = await self._db.run(
            lambda c: c.execute(
                "UPDATE active_runs SET lease_expires_at = ? WHERE owner = ? RETURNING run_id, epoch",
                (expires_at, self.holder),
            ).fetchall()
        )
        self._valid_until = began + self.seconds * 2 / 3
        return {str(row[0]): int(row[1]) for row in rows}

    async def confirm(self, run_id: str, epoch: int) -> bool:
        """Whether this process still holds the run at `epoch`, asked of the database (renewing its leases).
        While the database can't answer, it waits: an owner unsure of its run does nothing with it."""
        while True:
            try:
                held = await self.renew()
            except DatabaseUnavailable:
                await asyncio.sleep(CONFIRM_RETRY_SECONDS)
                continue
            return held.get(run_id) == epoch

    async def left(self) -> list[LeftRun]:
        """The runs of other owners that may be taken over now: expired, released, or their owner gone."""
        now = self._clock()
        # Expired, or of this host (whose owner may be gone): the live leases of other hosts are not read.
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT run_id, owner, epoch, lease_expires_at FROM active_runs "
                "WHERE owner <> ? AND (lease_expires_at <= ? OR owner LIKE ?) ORDER BY admitted_at",
                (self.holder, now, f"{socket.gethostname()}:%"),
            ).fetchall()
        )
        found = [LeftRun(str(r[0]), str(r[1]), int(r[2]), holder_gone(str(r[1]))) for r in rows]
        return [run for run, row in zip(found, rows, strict=True) if row[3] <= now or run.owner_gone]

    async def claim(self, left: LeftRun) -> int | None:
        """Own the run from now on, its epoch one more; None if another process was first, or its owner
        renewed it meanwhile."""
        now, expires_at = self._clock(), self.expiry()

        def q(conn: Connection) -> int | None:
            row = conn.execute(
                "UPDATE active_runs SET owner = ?, epoch = epoch + 1, lease_expires_at = ? "
                "WHERE run_id = ? AND owner = ? AND epoch = ? AND (lease_expires_at <= ? OR ? = 1) RETURNING epoch",
                (self.holder, expires_at, left.run_id, left.owner, left.epoch, now, int(left.owner_gone)),
            ).fetchone()
            return None if row is None else int(row[0])

        return await self._db.transaction(q)

    async def abandon(self, run_id: str) -> None:
        """Give up the run's row (no run of this process is behind it): anyone, this process too, may take it."""
        await self._db.run(
            lambda c: c.execute(
                "UPDATE active_runs SET owner = '', lease_expires_at = 0 WHERE run_id = ? AND owner = ?",
                (run_id, self.holder),
            )
        )

    async def release(self) -> None:
        """Let every run of this process be taken over at once (a graceful stop, after the journal has them)."""
        await self._db.run(
            lambda c: c.execute("UPDATE active_runs SET lease_expires_at = 0 WHERE owner = ?", (self.holder,))
        )

    async def aclose(self) -> None:
        if self._renewal is not None and not self._renewal.done():
            self._renewal.cancel()
            await asyncio.gather(self._renewal, return_exceptions=True)

"""The keeper of a process's runs: every third of a lease it renews the leases of the runs this process
owns (`pheby.runs.leases`), lets go of any another process took over meanwhile, and takes over the runs
that a process which stopped, died or was paused past its lease left behind (`pheby.runs.reattach`).
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from pheby.errors import DatabaseError
from pheby.runs.active import ActiveRun
from pheby.runs.leases import RunLeases

log = logging.getLogger("pheby.runs")


class KeptRuns(Protocol):
    """What the keeper needs of the run engine (`RunManager`)."""

    def all_active(self) -> list[ActiveRun]: ...

    def let_go(self, run: ActiveRun) -> None: ...


class RunKeeper:
    def __init__(self, runs: KeptRuns, leases: RunLeases, take_over: Callable[[], Awaitable[list[ActiveRun]]]) -> None:
        self._runs = runs
        self._leases = leases
        self._take_over = take_over
        self._suspects: set[str] = set()  # rows this process owns with no run of its behind them, at the last pass

    async def keep(self) -> None:
        """Until cancelled, every `renew_every` seconds (start-up's `reattach` has just done the first pass)."""
        while True:
            await asyncio.sleep(self._leases.renew_every)
            await self.once()

    async def once(self) -> None:
        # Judged: the runs journaled before the renewal began (one journaled meanwhile may be missing from it).
        judged = [run for run in self._runs.all_active() if run.epoch and not run.finished.is_set()]
        try:
            held = await self._leases.renew()
        except DatabaseError as exc:
            log.warning("renewing the run leases failed (%s); trying again", type(exc).__name__)
            return
        for run in judged:
            # An ending run's row goes before its end is said: missing from the renewal, it is not taken over.
            if not (run.finished.is_set() or run.ending) and held.get(run.run_id) != run.epoch:
                self._runs.let_go(run)
        try:
            await self._abandon_orphans(held)
            carried = await self._take_over()
        except DatabaseError as exc:
            log.warning("looking for runs to take over failed (%s); trying again", type(exc).__name__)
            return
        if carried:
            log.info("took over %d run(s) another process left", len(carried))

    async def _abandon_orphans(self, held: dict[str, int]) -> None:
        """A row this process owns with no run of its own behind it (a run's end that failed to delete it)
        would hold its conversation for good: seen at two renewals in a row (no run starting or ending is
        that slow), it is given up, and taken over (so followed to its end) like any run left behind."""
        active = {run.run_id for run in self._runs.all_active()}
        orphans = {run_id for run_id in held if run_id not in active}
        for run_id in orphans & self._suspects:
            log.warning("run %s: journaled as this process's, but not under way here; giving it up", run_id)
            await self._leases.abandon(run_id)
        self._suspects = orphans - self._suspects

"""The keeper of a process's runs: every third of a lease it renews the leases of the runs this process
owns (`pheby.runs.leases`), lets go of any another process took over meanwhile, and takes over the runs
that a process which stopped, died or was paused past its lease left behind (`pheby.runs.reattach`).
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable

from pheby.errors import DatabaseError
from pheby.runs.active import ActiveRun
from pheby.runs.engine import RunManager
from pheby.runs.leases import RunLeases

log = logging.getLogger("pheby.runs")


class RunKeeper:
    def __init__(
        self, runs: RunManager, leases: RunLeases, take_over: Callable[[], Awaitable[list[ActiveRun]]]
    ) -> None:
        self._runs = runs
        self._leases = leases
        self._take_over = take_over

    async def keep(self) -> None:
        """Until cancelled, every `renew_every` seconds."""
        while True:
            await self.once()
            await asyncio.sleep(self._leases.renew_every)

    async def once(self) -> None:
        # Judged: the runs journaled before the renewal began (one journaled meanwhile may be missing from it).
        judged = [run for run in self._runs.all_active() if run.epoch and not run.finished.is_set()]
        try:
            held = await self._leases.renew()
        except DatabaseError as exc:
            log.warning("renewing the run leases failed (%s); trying again", type(exc).__name__)
            return
        for run in judged:
            if not run.finished.is_set() and held.get(run.run_id) != run.epoch:
                self._runs.let_go(run)
        try:
            carried = await self._take_over()
        except DatabaseError as exc:
            log.warning("looking for runs to take over failed (%s); trying again", type(exc).__name__)
            return
        if carried:
            log.info("took over %d run(s) another process left", len(carried))

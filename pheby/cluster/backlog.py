"""Events a process could not log while the database was down, appended once it is back.

While the database is down, a broadcast still reaches this process's own connections at once; the event
waits here (in broadcast order, bounded) and is appended when the database answers again, marked
`early` so this process doesn't deliver it a second time. The other processes get it then, in seq order,
late but not lost. While anything waits here, newer events wait behind it: an account's events are
logged in the order they were broadcast.
"""

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from pheby import metrics
from pheby.cancelling import cancel_and_wait, raise_if_cancelled
from pheby.errors import DatabaseError, DatabaseUnavailable
from pheby.events import EventLog

__all__ = ["BACKLOG_EVENTS", "Backlog"]

log = logging.getLogger(__name__)

BACKLOG_EVENTS: Final = 10_000  # past it the oldest go unlogged (counted)
RETRY_SECONDS: Final = 1.0


class _Unlogged(NamedTuple):
    account_id: str
    kind: str
    payload: dict[str, Any]


class Backlog:
    """`on_appended(account_id, seq)` is told of each event once it is logged."""

    def __init__(
        self,
        log: EventLog,
        on_appended: Callable[[str, int], None],
        *,
        max_events: int = BACKLOG_EVENTS,
        retry_seconds: float = RETRY_SECONDS,
    ) -> None:
        self._log = log
        self._on_appended = on_appended
        self._max_events = max_events
        self._retry_seconds = retry_seconds
        self._events: deque[_Unlogged] = deque()
        self._task: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> int:
        """Events waiting to be logged (while any do, newer events wait behind them)."""
        return len(self._events)

    def add(self, account_id: str, kind: str, payload: dict[str, Any]) -> None:
        if not self._events:
            log.warning("events can't be logged now: this process's clients get them, the others once it can")
        if len(self._events) >= self._max_events:
            self._events.popleft()
            metrics.EVENTS_UNLOGGED.inc()
        self._events.append(_Unlogged(account_id, kind, {**payload, "early": True}))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain(), name="cluster-backlog")

    async def aclose(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _drain(self) -> None:
        while self._events:
            raise_if_cancelled()  # redis-py (the ring after each append) may swallow a cancel
            event = self._events[0]
            try:
                seq = await self._log.append(event.account_id, event.kind, event.payload)
            except DatabaseUnavailable:
                await asyncio.sleep(self._retry_seconds)
                continue
            except DatabaseError:
                log.exception("an event could not be logged; dropped")  # the account went, say
                metrics.EVENTS_UNLOGGED.inc()
                self._events.popleft()
                continue
            self._events.popleft()
            self._on_appended(event.account_id, seq)
        log.info("events are logged again")

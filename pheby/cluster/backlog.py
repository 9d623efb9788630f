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

import msgspec

from pheby import metrics
from pheby.cancelling import cancel_and_wait, raise_if_cancelled
from pheby.errors import DatabaseError, DatabaseUnavailable
from pheby.events import EventLog

__all__ = ["BACKLOG_EVENTS", "Backlog"]

log = logging.getLogger(__name__)

BACKLOG_EVENTS: Final = 10_000  # past it (or past `BACKLOG_BYTES` of payloads) the oldest go unlogged (counted)
BACKLOG_BYTES: Final = 32 * 1024 * 1024
RETRY_SECONDS: Final = 1.0

_encoder = msgspec.json.Encoder()


class _Unlogged(NamedTuple):
    account_id: str
    kind: str
    payload: dict[str, Any]
    size: int  # of the payload in JSON


class Backlog:
    """`on_appended(account_id, seq)` is told of each event once it is logged."""

    def __init__(
        self,
        log: EventLog,
        on_appended: Callable[[str, int], None],
        *,
        max_events: int = BACKLOG_EVENTS,
        max_bytes: int = BACKLOG_BYTES,
        retry_seconds: float = RETRY_SECONDS,
    ) -> None:
        self._log = log
        self._on_appended = on_appended
        self._max_events = max_events
        self._max_bytes = max_bytes
        self._bytes = 0
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
        early = {**payload, "early": True}
        unlogged = _Unlogged(account_id, kind, early, len(_encoder.encode(early)))
        while self._events and (len(self._events) >= self._max_events or self._bytes + unlogged.size > self._max_bytes):
            self._bytes -= self._events.popleft().size
            metrics.EVENTS_UNLOGGED.inc()
        self._events.append(unlogged)
        self._bytes += unlogged.size
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
                self._done_with(event)
                continue
            self._done_with(event)
            self._on_appended(event.account_id, seq)
        log.info("events are logged again")

    def _done_with(self, event: _Unlogged) -> None:
        """Let go of the event just appended (or dropped), unless a bound let it go during the append."""
        if self._events and self._events[0] is event:
            self._bytes -= self._events.popleft().size

"""A process's feed: every subscribed account's logged events, exactly once and in seq order, whichever
process appended them.

The feed remembers the seq it has delivered per account and only ever delivers from the log, in order,
what comes after it: a ring (`pheby.events.bell`) is only a reason to read. So a ring past the next seq
(a lost or late ring) reads the rows in between first; a ring at or below the position is nothing new.
Three more reasons to read cover rings that never come:

- `RESYNC` from the bell (it reconnected, or dropped rings): every position is checked at once;
- a position check every `check_seconds`: one `heads` query for all subscribed accounts catches a
  subscriber that went silent;
- while the bell is down, the same check every `poll_seconds` (at most 1 s): polling, nothing lost.

A live message (`pheby.events.bell.Live`: published, never logged) names the seq it follows: the feed
first delivers the events up to it, then hands it to `on_live`, so it never overtakes the logged event it
came after. An event this process appended itself is `offer`ed: delivered at once when it is the next,
with no read of the log.

Reads that find events no ring had announced are counted (`gap_repairs`, by cause). A position older
than the log retains (`Truncated`) is not served from events: `on_truncated(account_id)` is called
(the client is owed a full snapshot) and the feed goes on from the log's head.
"""

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable

from pheby import metrics
from pheby.cancelling import cancel_and_wait
from pheby.errors import DatabaseUnavailable
from pheby.events.bell import RESYNC, Bell, Letter, Live, Ring
from pheby.events.log import MAX_READ, Event, EventLog, Truncated

__all__ = ["CHECK_SECONDS", "POLL_SECONDS", "Feed"]

log = logging.getLogger(__name__)

CHECK_SECONDS = 5.0  # positions checked this often while the bell rings
POLL_SECONDS = 1.0  # and this often while it is down
ERROR_PAUSE = 0.5  # after an error the loop did not expect, before it goes on


class Feed:
    """Delivers the subscribed accounts' events to `on_event`, one at a time, in seq order, once each.

    `on_truncated(account_id)` is called instead when events can't bring an account up to date; the
    events after the log's head at that moment follow. One feed per process; `subscribe` is idempotent
    (the caller counts its own listeners of an account). The callbacks may `unsubscribe`, never
    `subscribe` (it waits for the delivery they are part of)."""

    def __init__(
        self,
        log: EventLog,
        bell: Bell,
        on_event: Callable[[Event], Awaitable[None]],
        on_truncated: Callable[[str], Awaitable[None]],
        *,
        on_live: Callable[[Live], Awaitable[None]] | None = None,
        on_letter: Callable[[Letter], None] | None = None,
        check_seconds: float = CHECK_SECONDS,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self.log = log
        self.bell = bell
        self.check_seconds = check_seconds
        self.poll_seconds = poll_seconds
        self.last_timed_check = 0.0  # when the last check or poll of the timer began (monotonic)
        self._on_event = on_event
        self._on_truncated = on_truncated
        self._on_live = on_live
        self._on_letter = on_letter  # the bell's letters for this process (they are not the log's)
        self._positions: dict[str, int] = {}  # account → the seq delivered last
        self._lock = asyncio.Lock()  # one reader of the log at a time: deliveries never interleave
        self._task: asyncio.Task[None] | None = None
        self.gap_repairs: Counter[str] = Counter()  # reads that found events no ring had announced, by cause
        self.delivered_by: Counter[str] = Counter()  # events delivered, by what made the feed read them
        self.resyncs = 0

    def deliver_letters(self, on_letter: Callable[[Letter], None]) -> None:
        """Who gets the bell's letters for this process."""
        self._on_letter = on_letter

    @property
    def positions(self) -> dict[str, int]:
        """A copy of each subscribed account's delivered position."""
        return dict(self._positions)

    async def start(self) -> None:
        """Start the bell and the feed's loop."""
        await self.bell.start()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="event-feed")

    async def aclose(self) -> None:
        """Stop the loop (the bell is its owner's to close)."""
        await cancel_and_wait(self._task)
        self._task = None

    async def subscribe(self, account_id: str, after: int | None = None) -> int:
        """Deliver the account's events from now on (`after` None: those after the log's head now), or
        those after `after` (a client's position: they are delivered before this returns, or
        `on_truncated` is called). Returns the position delivered. Raises `DatabaseUnavailable` if the
        log can't be read now."""
        await self.bell.subscribe(account_id)  # first: a ring for anything appended after the read below
        async with self._lock:
            if account_id in self._positions:
                return self._positions[account_id]
            if after is None:
                after = (await self.log.heads([account_id]))[account_id]
            self._positions[account_id] = after
        await self._catch_up(account_id, "subscribe")
        return self._positions.get(account_id, after)

    def position(self, account_id: str) -> int | None:
        """The seq delivered last of the account (None: not subscribed)."""
        return self._positions.get(account_id)

    async def offer(self, event: Event) -> bool:
        """An event this process appended (its transaction committed): delivered now if it is the account's
        next, else after the log's events before it (once, whichever way it comes). False when the account
        is not subscribed here: nothing was delivered."""
        async with self._lock:
            position = self._positions.get(event.account_id)
            if position is None:
                return False
            if position >= event.seq:
                return True  # its ring, or a check, was here first
            if position == event.seq - 1:
                self._positions[event.account_id] = event.seq
                self.delivered_by["own"] += 1
                metrics.EVENTS_DELIVERED.inc()
                await self._deliver_safely(self._on_event(event))
                return True
        await self._catch_up(event.account_id, "own")
        return True

    async def catch_up(self, account_id: str) -> None:
        """Deliver the account's events the log has now (a snapshot taken elsewhere awaits them)."""
        await self._catch_up(account_id, "snapshot")

    async def unsubscribe(self, account_id: str) -> None:
        """Deliver no more of the account's events."""
        self._positions.pop(account_id, None)  # a catch-up under way stops before its next event
        await self.bell.unsubscribe(account_id)

    async def _run(self) -> None:
        next_check = time.monotonic() + self.check_seconds
        while True:
            try:
                interval = self.check_seconds if self.bell.connected else min(self.poll_seconds, self.check_seconds)
                now = time.monotonic()
                next_check = min(next_check, now + interval)
                try:
                    async with asyncio.timeout(max(0.0, next_check - now)):
                        item = await self.bell.receive()
                except TimeoutError:
                    self.last_timed_check = next_check = time.monotonic()
                    next_check += interval
                    await self._check_all("check" if self.bell.connected else "poll")
                    continue
                if item is RESYNC:
                    self.resyncs += 1
                    metrics.EVENT_RESYNCS.inc()
                    await self._check_all("resync")
                elif isinstance(item, Ring):
                    await self._on_ring(item)
                elif isinstance(item, Live):
                    await self._on_live_message(item)
                elif isinstance(item, Letter) and self._on_letter is not None:
                    self._on_letter(item)
            except asyncio.CancelledError:
                raise
            except DatabaseUnavailable:
                log.warning("event feed: the database is unavailable; reading again in %.1f s", self.poll_seconds)
                await asyncio.sleep(min(self.poll_seconds, ERROR_PAUSE))
            except Exception:
                log.exception("event feed: unexpected error; going on")
                await asyncio.sleep(ERROR_PAUSE)

    async def _on_ring(self, ring: Ring) -> None:
        position = self._positions.get(ring.account_id)
        if position is None or ring.seq <= position:
            return  # not subscribed here, or delivered already (read ahead of its ring)
        if ring.seq > position + 1:
            self._repaired(ring.account_id, "ring")
        await self._catch_up(ring.account_id, "ring")
        if ring.published_at is not None and self._positions.get(ring.account_id, 0) >= ring.seq:
            metrics.EVENT_BELL_LAG.observe(max(0.0, time.time() - ring.published_at))

    async def _on_live_message(self, live: Live) -> None:
        position = self._positions.get(live.account_id)
        if position is None or self._on_live is None:
            return
        if live.after > position:  # it follows an event not delivered yet: that one first
            self._repaired(live.account_id, "live")
            await self._catch_up(live.account_id, "live")
        async with self._lock:  # no delivery of an event between the catch-up's and this
            if live.account_id in self._positions:
                await self._deliver_safely(self._on_live(live))

    async def _check_all(self, cause: str) -> None:
        """One `heads` query for every subscribed account; read those behind."""
        if not self._positions:
            return
        found = await self.log.heads(list(self._positions))
        for account_id, head in found.items():
            position = self._positions.get(account_id)
            if position is not None and head != position:
                self._repaired(account_id, cause)
                await self._catch_up(account_id, cause)

    def _repaired(self, account_id: str, cause: str) -> None:
        self.gap_repairs[cause] += 1
        metrics.EVENT_GAP_REPAIRS.labels(cause).inc()
        log.debug("event feed: reading events no ring announced (%s)", cause)

    async def _catch_up(self, account_id: str, cause: str) -> None:
        """Deliver every event after the account's position, in order, under the lock."""
        async with self._lock:
            while (position := self._positions.get(account_id)) is not None:
                try:
                    events = await self.log.read_after(account_id, position, MAX_READ)
                except Truncated as e:
                    metrics.EVENT_SNAPSHOTS.inc()
                    self._positions[account_id] = e.head
                    await self._deliver_safely(self._on_truncated(account_id))
                    return
                for event in events:
                    if self._positions.get(account_id) != event.seq - 1:
                        return  # unsubscribed meanwhile
                    self._positions[account_id] = event.seq
                    self.delivered_by[cause] += 1
                    metrics.EVENTS_DELIVERED.inc()
                    await self._deliver_safely(self._on_event(event))
                if len(events) < MAX_READ:
                    return

    @staticmethod
    async def _deliver_safely(call: Awaitable[None]) -> None:
        """A failing callback is logged: its event counts as delivered (never twice), the feed goes on."""
        try:
            await call
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("event feed: the callback failed")

"""The run stream's health, its resumption, and how a run's end is learnt when its stream is lost.

A 0.22-era gateway numbers a run's events (`seq`) and replays those after a `Last-Event-ID`:
`resumed_event_batches` reopens a broken stream from the last event seen (`resume_tries` tries, backing off
from `first_delay` to `max_delay`) and drops any event it already yielded, so whoever reads it never
sees the break. A gateway that does not number its events, a `replay.truncated` (events lost), a
reopening that can't connect (Hermes is down), or tries exhausted: the break is raised as
`HermesUnavailable`, and the fallback below takes over.

Hermes 0.19.0 allows one consumer per run stream and no resume, so once the stream breaks (or ends
without a terminal event) the only way to learn how the run ends is `GET /v1/runs/{id}`. `settle`
asks, with backoff, until Hermes reports a terminal status; when Hermes can't be reached for a
while in a row, or no longer knows the run (a gateway restart loses every run), the run is `lost`.

A stream can also go silent without breaking (a frozen host, a proxy that keeps the socket open);
Hermes's own keepalive comes only every 30 s. While a stream is quiet, `watch_stream` asks Hermes
about the run every second, and returns when Hermes has shown no sign of life for as long as
`settle` allows.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Final, Literal, NamedTuple

import httpx

import hermes_client as hc

log = logging.getLogger("pheby.runs")

LOST_ERROR: Final = "Lost contact with Hermes; the run was stopped"
TERMINAL_STATUSES: Final = frozenset({"completed", "failed", "cancelled", "interrupted"})


class RecoveryTiming(NamedTuple):
    first_delay: float = 0.25
    max_delay: float = 2.0
    unreachable_for: float = 5.0  # seconds without an answer in a row before the run counts as lost
    poll_timeout: float = 2.0  # one status request
    stop_timeout: float = 1.0  # the best-effort stop of a lost run
    quiet_before_watch: float = 2.0  # seconds of stream silence before Hermes is asked whether it lives
    watch_interval: float = 1.0
    give_up_after: float = 6 * 3600.0  # a run Hermes reports running for longer than this is given up
    resume_tries: int = 5  # reopenings of a numbered stream in a row, without an event between them


DEFAULT_TIMING: Final = RecoveryTiming()
# A paused reader wakes this long before the held text goes out, so what it reads goes out with it.
READ_LEAD_SECONDS: Final = 0.005


class Outcome(NamedTuple):
    """How the run ended by Hermes's word (`lost`: Hermes can't say)."""

    status: Literal["completed", "failed", "cancelled", "lost"]
    output: str = ""
    error: str | None = None


class Contact:
    """Since when Hermes has failed to answer about a run, in a row: ONE window for the stream's
    resumption and `settle`, so a run is lost `unreachable_for` seconds after the first failure however
    that time was spent (through a proxy a dead Hermes looks like reopenings that connect, then break)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.failing_since: float | None = None

    def answered(self) -> None:
        self.failing_since = None

    def failed(self) -> float:
        """Record a failure; how long Hermes has failed to answer, in a row."""
        now = self.clock()
        if self.failing_since is None:
            self.failing_since = now
        return now - self.failing_since


class ReplayLost(hc.HermesUnavailable):
    """A resumed stream can't give every event after the last one seen: the gateway dropped some."""


async def resumed_event_batches(
    client: hc.HermesClient,
    hermes_run_id: str,
    timing: RecoveryTiming = DEFAULT_TIMING,
    *,
    contact: Contact | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    read_pause: hc.ReadPause | None = None,
    after: int | None = None,
) -> AsyncGenerator[list[hc.RunEvent], None]:
    """The run's events until its terminal one, each once and in order, across breaks of a numbered
    stream; in the lists `HermesClient.run_event_batches` gives (one per socket read, never empty).

    Raises `HermesUnavailable` when the stream breaks and can't be resumed without loss, or Hermes has
    failed to answer for `unreachable_for` (counted in `contact`, which `settle` goes on counting in), and
    whatever else `run_event_batches` raises (`HermesNotFound`: Hermes no longer streams the run).
    `read_pause` goes to `run_event_batches` (see `pause_while_held`). `after`: the last event consumed
    before (a stopped process's, from the journal): the stream is opened after it."""
    contact = contact or Contact()
    last_seq: int | None = after
    failures = 0
    delay = timing.first_delay
    while True:
        try:
            stream = client.run_event_batches(hermes_run_id, last_event_id=last_seq, read_pause=read_pause)
            async with contextlib.aclosing(stream) as batches:
                async for batch in batches:
                    contact.answered()
                    fresh: list[hc.RunEvent] = []
                    for event in batch:
                        if type(event) is hc.ReplayTruncated:
                            if fresh:
                                yield fresh
                            raise ReplayLost("the resumed run stream lost events (replay.truncated)")
                        seq = event.seq
                        if isinstance(seq, int):
                            if last_seq is not None and seq <= last_seq:
                                continue  # already yielded before the break
                            last_seq, failures, delay = seq, 0, timing.first_delay
                        fresh.append(event)
                    if fresh:
                        yield fresh
            return
        except hc.HermesUnavailable as exc:
            failing_for = contact.failed()
            # Resumable only where this gateway numbers its events (seen in this stream, or in the last one).
            numbered = last_seq is not None or client.stream_numbered is True
            # A reopening that can't even connect: Hermes is down, and `settle` says when it counts as lost.
            unreachable = failures > 0 and isinstance(exc.__cause__, httpx.ConnectError)
            gone = unreachable or failing_for >= timing.unreachable_for or failures >= timing.resume_tries
            if not numbered or gone or isinstance(exc, ReplayLost):
                raise
            failures += 1
            log.info("run %s: its stream broke (%s); resuming after event %s", hermes_run_id, exc, last_seq)
            await sleep(delay)
            delay = min(delay * 2, timing.max_delay)


class ReadNow:
    """Set once (by a cancel): the run's reader stops pausing before its reads, at once and from then on.

    A pause is a plain sleep this can end: one future and one timer, as `asyncio.sleep` (a pause per
    window; `asyncio.timeout` around an `Event.wait` cost several times as much)."""

    __slots__ = ("_sleeping", "is_set")

    def __init__(self) -> None:
        self.is_set = False
        self._sleeping: asyncio.Future[None] | None = None

    def set(self) -> None:
        self.is_set = True
        if self._sleeping is not None and not self._sleeping.done():
            self._sleeping.set_result(None)

    async def sleep(self, seconds: float) -> None:
        """Sleep `seconds`, or until `set`."""
        if self.is_set:
            return
        loop = asyncio.get_running_loop()
        self._sleeping = sleeping = loop.create_future()
        timer = loop.call_later(seconds, _wake, sleeping)
        try:
            await sleeping
        finally:
            timer.cancel()
            self._sleeping = None


def _wake(sleeping: "asyncio.Future[None]") -> None:
    if not sleeping.done():
        sleeping.set_result(None)


def pause_while_held(
    held_for: Callable[[], float],
    send_held: Callable[[], None],
    read_now: ReadNow,
    lead: float = READ_LEAD_SECONDS,
) -> hc.ReadPause:
    """What a run's reader awaits before each read from Hermes: while a delta of the run would be held
    back anyway (`held_for`: seconds until its window ends, 0 when it would go out at once), until
    just before the window ends, so the events that came meanwhile are read in one go; else nothing
    (window 0, before the first text, after a quiet window).

    Awaited again after that read, with the window's end at most `lead` away, it sends the held text
    itself (`send_held`) rather than leave it to the window's end: one wake-up a window, not two. Events
    other than text are seen up to one window late, as the text is. `read_now` ends every pause, now
    and later (a cancel: Hermes's answer to it is read at once)."""

    async def pause() -> None:
        while not read_now.is_set:
            held = held_for()
            if held <= 0:
                return
            if held <= lead:
                send_held()  # the window's events are read: out with its text now
                held = held_for()
                if held <= lead:  # nothing was held: the window ends, quiet, and the next read is at once
                    await read_now.sleep(held)
                    continue
            await read_now.sleep(held - lead)
            return

    return pause


async def settle(
    client: hc.HermesClient,
    hermes_run_id: str,
    timing: RecoveryTiming = DEFAULT_TIMING,
    *,
    contact: Contact | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    on_status: Callable[[hc.RunStatus], Awaitable[None]] | None = None,
) -> Outcome:
    """Poll Hermes for the run's status until it is terminal, or the run is lost (no answer for
    `unreachable_for` in a row, counted in `contact` from the stream's first failure where one is given).
    `on_status` hears every status that is not terminal (what the run waits on, `pheby.runs.unseen`)."""
    contact = contact or Contact(clock)
    delay = timing.first_delay
    started = clock()
    while True:
        try:
            status = await asyncio.wait_for(client.get_run(hermes_run_id), timing.poll_timeout)
        except hc.HermesNotFound:
            log.warning("run %s: Hermes no longer knows it", hermes_run_id)
            return Outcome("lost")
        except (hc.HermesError, TimeoutError) as exc:
            failing_for = contact.failed()
            if failing_for >= timing.unreachable_for:
                log.warning("run %s: Hermes unreachable for %.1f s (%s)", hermes_run_id, failing_for, exc)
                return Outcome("lost")
        else:
            contact.answered()
            if status.status == "completed":
                return Outcome("completed", status.output if isinstance(status.output, str) else "")
            if status.status == "cancelled":
                return Outcome("cancelled")
            if status.status in ("failed", "interrupted"):  # interrupted: a 0.22-era gateway shut down under it
                return Outcome("failed", error=status.error if isinstance(status.error, str) else None)
            if on_status is not None:
                await on_status(status)
        if clock() - started >= timing.give_up_after:
            return Outcome("lost")
        await sleep(delay)
        delay = min(delay * 2, timing.max_delay)


async def stop_lost(client: hc.HermesClient, hermes_run_id: str, timing: RecoveryTiming = DEFAULT_TIMING) -> None:
    """Ask Hermes to stop a run we lost track of, best effort (it may already be gone)."""
    with contextlib.suppress(hc.HermesError, TimeoutError):
        await asyncio.wait_for(client.stop_run(hermes_run_id), timing.stop_timeout)


async def watch_stream(
    client: hc.HermesClient,
    hermes_run_id: str,
    quiet_since: Callable[[], float | None],
    timing: RecoveryTiming = DEFAULT_TIMING,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> bool:
    """Return once Hermes is gone while the stream is quiet (`quiet_since`: since when the reader
    waits for an event, None while it handles one): True; or once Hermes says the run ended while its
    stream stays quiet (a stream that will never say so): False. Never returns while Hermes answers that
    the run goes on."""
    last_life = clock()
    while True:
        await sleep(timing.watch_interval)
        quiet = quiet_since()
        now = clock()
        if quiet is None or now - quiet < timing.quiet_before_watch:
            last_life = now
            continue
        last_life = max(last_life, quiet)
        try:
            status = await asyncio.wait_for(client.get_run(hermes_run_id), timing.poll_timeout)
        except hc.HermesNotFound:
            log.warning("run %s: Hermes no longer knows it while its stream is open", hermes_run_id)
            return True
        except (hc.HermesError, TimeoutError):
            if clock() - last_life >= timing.unreachable_for:
                log.warning("run %s: its stream and Hermes silent for %.1f s", hermes_run_id, clock() - last_life)
                return True
        else:
            last_life = clock()
            if status.status in TERMINAL_STATUSES:
                log.warning("run %s: Hermes says it ended (%s) while its stream is quiet", hermes_run_id, status.status)
                return False

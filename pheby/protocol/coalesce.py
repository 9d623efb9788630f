"""Coalescing of a run's cumulative `message.delta` events before they fan out.

Every `message.delta` carries the whole draft so far, so a client needs only the newest one. Per
message (`message_id`), the first delta goes out at once; after it, at most one per window (a window
that grows with the draft, `growing_window`: a short answer is not held back long, a long one's frames
are few), always the newest text, sent by a timer at the end of the window, or a few ms before it by the run's
reader once it has read the window's events (`send_window_early`). Any other event broadcast to the
account first sends that account's pending deltas, so the order the spec defines (text before the
`tool.event`, `approval.request`, `message.complete`, ... that follows it) is unchanged and no
text is lost. A message's entry lives until its `message.complete` (or its conversation's
`run.finished`), or until a window passes with nothing new: nothing stays behind after a run.

A reconnect snapshot (`conversation.open`) is the run's draft, which is the text of the newest
delta broadcast; a pending delta sent after the snapshot therefore repeats the snapshot's text,
never an older one.

Connections that asked for append deltas (`pheby.protocol.append`) have a coalescer of their own, whose
window is 0 unless an operator sets one (`PHEBY_WS_APPEND_WINDOW_MS`): their frames carry only the new
text, so each delta goes out as it comes, and deltas are batched only where a socket is behind
(`pheby.protocol.hub.Connection.send_delta` folds them).
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from pheby.protocol.frames import Event, MessageComplete, MessageDelta, RunFinished
from pheby.protocol.hub import EVENT_ARRIVED, Hub

Forward = Callable[[str, Event], None]
DEFAULT_WINDOW_SECONDS = 0.1
DEFAULT_APPEND_WINDOW_SECONDS = 0.0  # append deltas go out as they come, folded where a socket is behind
FULL_WINDOW_CHARS = 500  # a cumulative draft this long waits the whole window between frames
SHORTEST_WINDOW_SECONDS = 0.01


def growing_window(window: float, length: int) -> float:
    """A cumulative client's window after a draft of `length` characters: the whole `window` for a long draft
    (each frame carries all of it: fewer frames, fewer bytes), a share of it for a short one, so a short
    answer is not held back the whole window; never under `SHORTEST_WINDOW_SECONDS` (nor over `window`)."""
    return min(window, max(SHORTEST_WINDOW_SECONDS, window * length / FULL_WINDOW_CHARS))


@dataclass
class _Stream:
    """One message being streamed: its newest unsent delta and the timer that ends its window."""

    account_id: str
    conversation_id: str
    pending: MessageDelta | None
    timer: asyncio.TimerHandle
    window_ends: float  # loop time
    arrived: float | None = None  # when the pending delta's Hermes event arrived (`EVENT_ARRIVED`)


class DeltaCoalescer:
    """Sits in front of `forward(account_id, event)` (the hub's broadcast) and thins out deltas.

    `window_seconds` 0 forwards every event as it comes; `grows`: the window after a delta is
    `growing_window` of its text's length. `loop` is for tests (a fake clock); by default the running loop
    is used.
    """

    def __init__(
        self,
        forward: Forward,
        window_seconds: float,
        loop: asyncio.AbstractEventLoop | None = None,
        *,
        grows: bool = False,
    ) -> None:
        self._forward = forward
        self._window = window_seconds
        self._grows = grows
        self._loop = loop
        self._streams: dict[str, _Stream] = {}  # by message_id
        self._by_account: dict[str, dict[str, _Stream]] = {}  # account -> message_id -> stream, in start order

    def broadcast(self, account_id: str, event: Event) -> None:
        """Forward `event`, a delta subject to its message's window, anything else after the account's
        pending deltas."""
        if isinstance(event, MessageDelta):
            self.delta(account_id, event)
            return
        self.flush(account_id)
        self._forward(account_id, event)
        self.settle(account_id, event)

    def delta(self, account_id: str, event: MessageDelta) -> None:
        """Forward the delta now if its message has no window open, else hold it (the newest replaces the one held)."""
        if self._window <= 0:
            self._forward(account_id, event)
        else:
            self._delta(account_id, event)

    def settle(self, account_id: str, event: Event) -> None:
        """After `event` went out: forget the messages it ends (`message.complete`, `run.finished`)."""
        if isinstance(event, MessageComplete):
            self._drop(event.message_id)
        elif isinstance(event, RunFinished):
            for message_id, stream in list(self._by_account.get(account_id, {}).items()):
                if stream.conversation_id == event.conversation_id:
                    self._drop(message_id)

    def flush(self, account_id: str) -> None:
        """Send the account's pending deltas now (each starts a new window)."""
        for message_id, stream in list(self._by_account.get(account_id, {}).items()):
            if stream.pending is not None:
                self._send_pending(message_id, stream, stream.pending)

    def held_for(self, message_id: str) -> float | None:
        """Seconds a delta of the message arriving now would be held back: until its window ends (None: it
        would go out at once). Until then its run's reader need not read Hermes (`pheby.runs.reader`)."""
        stream = self._streams.get(message_id)
        return None if stream is None else max(0.0, stream.window_ends - self._time())

    def send_window_early(self, message_id: str) -> None:
        """Send the message's pending delta now, its window about to end (`held_for` no more than a few
        ms): its run's reader has read what came in the window, and sending it now spares a wake-up at the
        window's end. The next window still ends one window after this one was to, so the pace stays one
        delta per window."""
        stream = self._streams.get(message_id)
        if stream is not None and (pending := stream.pending) is not None:
            self._send_pending(message_id, stream, pending, stream.window_ends + self._window_after(pending))

    def forget(self, message_id: str) -> None:
        """Drop the message's window and its held delta, unsent (nobody takes this form now)."""
        self._drop(message_id)

    def pending_messages(self) -> int:
        """How many messages have an entry (tests: nothing may stay behind)."""
        return len(self._streams)

    def _delta(self, account_id: str, event: MessageDelta) -> None:
        stream = self._streams.get(event.message_id)
        if stream is not None:
            stream.pending = event  # cumulative: the newest replaces the one waiting
            stream.arrived = EVENT_ARRIVED.get()
            return
        self._forward(account_id, event)  # the first text of a window goes out at once
        window = self._new_window(event.message_id, self._time() + self._window_after(event))
        stream = _Stream(account_id, event.conversation_id, None, *window)
        self._streams[event.message_id] = stream
        self._by_account.setdefault(account_id, {})[event.message_id] = stream

    def _window_after(self, event: MessageDelta) -> float:
        return growing_window(self._window, len(event.text)) if self._grows else self._window

    def _new_window(self, message_id: str, ends: float) -> tuple[asyncio.TimerHandle, float]:
        """The timer that ends a new window of the message at `ends` (loop time), and when it ends."""
        loop = self._loop or asyncio.get_running_loop()
        return loop.call_at(ends, self._window_ended, message_id), ends

    def _time(self) -> float:
        return (self._loop or asyncio.get_running_loop()).time()

    def _window_ended(self, message_id: str) -> None:
        stream = self._streams.get(message_id)
        if stream is None:
            return
        if stream.pending is None:
            self._drop(message_id)  # quiet for a whole window: the next delta may go out at once
        else:
            self._send_pending(message_id, stream, stream.pending)

    def _send_pending(
        self, message_id: str, stream: _Stream, event: MessageDelta, window_ends: float | None = None
    ) -> None:
        """Send `event`, the delta the stream held, and open the next window: to `window_ends`, by default one
        window after `event` from now."""
        stream.pending = None
        stream.timer.cancel()
        ends = self._time() + self._window_after(event) if window_ends is None else window_ends
        stream.timer, stream.window_ends = self._new_window(message_id, ends)
        arrived = EVENT_ARRIVED.set(stream.arrived)  # a held delta counts from its own event's arrival
        try:
            self._forward(stream.account_id, event)
        finally:
            EVENT_ARRIVED.reset(arrived)

    def _drop(self, message_id: str) -> None:
        stream = self._streams.pop(message_id, None)
        if stream is None:
            return
        stream.timer.cancel()
        group = self._by_account.get(stream.account_id)
        if group is not None:
            group.pop(message_id, None)
            if not group:
                del self._by_account[stream.account_id]


class CoalescingHub(Hub):
    """The hub, with every broadcast passing through `DeltaCoalescer`s first: one for the connections that
    take cumulative deltas (`delta_window_seconds`, growing with the draft), one for those that asked for
    append deltas, whose frames are small (`append_window_seconds`, by default 0: none held). An account
    with no append connection feeds only the first. The run's reader follows the shorter window of those
    holding text.

    Other arguments go to `Hub` unchanged.
    """

    def __init__(
        self,
        *args: Any,
        delta_window_seconds: float = DEFAULT_WINDOW_SECONDS,
        append_window_seconds: float = DEFAULT_APPEND_WINDOW_SECONDS,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.coalescer = DeltaCoalescer(partial(self.deliver, form="cumulative"), delta_window_seconds, grows=True)
        self.append_coalescer = DeltaCoalescer(partial(self.deliver, form="append"), append_window_seconds)
        self._coalescers = (self.coalescer, self.append_coalescer)

    def broadcast(self, account_id: str, event: Event) -> None:
        if isinstance(event, MessageDelta):
            cumulative, append = self.delta_forms(account_id)
            if cumulative:
                self.coalescer.delta(account_id, event)
            else:  # all append: holding drafts for nobody would cost its timers and sends. One held from
                # before is older than this delta: dropped, never to reach a cumulative client after a snapshot.
                self.coalescer.forget(event.message_id)
            if append:
                self.append_coalescer.delta(account_id, event)
            return
        for coalescer in self._coalescers:
            coalescer.flush(account_id)
        super().broadcast(account_id, event)
        for coalescer in self._coalescers:
            coalescer.settle(account_id, event)

    def delta_held_for(self, message_id: str) -> float:
        held = [h for c in self._coalescers if (h := c.held_for(message_id)) is not None]
        return min(held, default=0.0)

    def send_held_delta(self, message_id: str, within: float) -> None:
        for coalescer in self._coalescers:
            held = coalescer.held_for(message_id)
            if held is not None and held <= within:
                coalescer.send_window_early(message_id)

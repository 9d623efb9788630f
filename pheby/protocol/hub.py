"""Authenticated WebSocket connections and per-account fan-out, with their bounds.

Each connection has a send queue bounded in bytes (and frames) drained by one writer task, so a
slow client never delays the others: a connection that owes more than its bound is closed with
1013 (try again later) and reconnects. An event is encoded once (a `message.delta` once per form: the
cumulative one, and for connections that asked for append deltas, `pheby.protocol.append`'s) and queued
to every connection of its account. The hub caps the sockets of one account and of the whole server.

Each connection remembers the credential it was authenticated with (the stored token's id and
expiry; none for the owner secret), so a revoked credential's sockets can be found and closed
(see `pheby.revocation`): they get an `unauthorized` error, then a 1008 close.
"""

import asyncio
import contextlib
import logging
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Collection
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal, NamedTuple

from pheby import metrics
from pheby.db import Connection as DbConnection
from pheby.errors import RateLimited
from pheby.protocol.append import AppendDrafts
from pheby.protocol.frames import Event, MessageDelta, encode_event, error_event

log = logging.getLogger("pheby.ws")

SEND_QUEUE_FRAMES = 1024
SEND_QUEUE_BYTES = 8 * 1024 * 1024
MAX_CONNECTIONS_PER_ACCOUNT = 32
MAX_SOCKETS = 10_000
CLOSE_POLICY_VIOLATION = 1008
CLOSE_SERVICE_RESTART = 1012
CLOSE_TRY_AGAIN_LATER = 1013
REVOKED_SEND_SECONDS = 2.0  # how long the `unauthorized` frame may take before the close goes anyway

SendText = Callable[[str], Awaitable[None]]
Close = Callable[[int, str], Awaitable[None]]
Listener = Callable[[str, Event], None]


class Stamp(NamedTuple):
    """What goes into the log with an event (a run's place in its journal, `pheby.runs.journal.stamp`):
    `write(conn)` in the event's own append transaction, False to drop the event (its run is another
    process's now); `refused()` on the loop afterwards, when it was dropped."""

    write: Callable[[DbConnection], bool]
    refused: Callable[[], None]


Stamper = Callable[[str, Event], Stamp | None]
DeltaForm = Literal["cumulative", "append"]  # how a connection takes `message.delta` (`pheby.protocol.append`)
# When the event being broadcast arrived (loop time, `time.monotonic`): a run's reader sets it for each batch it
# read from Hermes; unset, an event arrives when it is broadcast. What `pheby_ws_event_to_frame_seconds` counts from.
EVENT_ARRIVED: ContextVar[float | None] = ContextVar("event_arrived", default=None)


def _now_or(arrived: float | None) -> float:
    return time.monotonic() if arrived is None else arrived


def utf8_size(frame: str) -> int:
    """The frame's size on the wire; `isascii` is O(1), so the common case costs no encoding."""
    return len(frame) if frame.isascii() else len(frame.encode())


@dataclass(slots=True)
class _Queued:
    """A frame waiting in a connection's queue; for an append delta, `delta_of` its message and `offset` where
    its text goes in the client's draft."""

    frame: str
    size: int
    arrived: float
    delta_of: str | None
    offset: int = 0


class Connection:
    """One authenticated socket: a bounded queue of encoded frames and the task that writes them.

    `token_id` and `expires_at` describe the credential the socket said hello with (None for the
    owner secret, which is not a stored token and never expires), `judged_at` when it was checked.
    """

    def __init__(
        self,
        account_id: str,
        send_text: SendText,
        close: Close,
        *,
        max_frames: int = SEND_QUEUE_FRAMES,
        max_bytes: int = SEND_QUEUE_BYTES,
        token_id: str | None = None,
        expires_at: float | None = None,
        judged_at: float = 0.0,
        delta_append: bool = False,
        delta_packed: bool = False,
        delta_pace: float = 0.0,
    ) -> None:
        self.id = uuid.uuid4().hex
        self.account_id = account_id
        self.token_id = token_id
        self.expires_at = expires_at
        self.judged_at = judged_at  # when its credential was checked (`pheby.auth.Principal.judged_at`)
        self._send_text = send_text
        self._close = close
        self._queue: deque[_Queued | None] = deque()  # None: stop once what is before it is written
        self._queued = asyncio.Event()  # set while the queue holds something
        self._max_frames = max_frames
        self._max_bytes = max_bytes
        self._owed_bytes = 0  # queued frames plus the one being written
        self._writer: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()
        # Set once the credential is revoked: the socket's messages are no longer handled.
        self.revoked = False
        # Whether the client is in front of its user: from hello on, until it says otherwise
        # (`presence.set`); an account with none in the foreground is reached by Web Push.
        self.foreground = True
        # Whether it asked for append deltas (`pheby.protocol.append`), and the draft generation it holds of
        # each message being streamed.
        self.delta_append = delta_append
        self.delta_packed = delta_append and delta_packed  # its continuations positional (`PackedAppend`)
        self._drafts: dict[str, int] = {}
        # Each message's append delta still waiting in the queue with no other frame but other messages' deltas
        # after it: a newer delta of the message is folded into it (`send_delta`), not queued behind it.
        self._unsent: dict[str, _Queued] = {}
        # A paced client's append deltas go out at most every `delta_pace` seconds (`pheby.protocol.append`):
        # until `_paced_until`, a delta at the head of the queue that may still be folded into waits, woken
        # early by `_hurry` when a frame it must precede is queued.
        self._delta_pace = delta_pace if delta_append else 0.0
        self._paced_until = 0.0
        self._hurry = asyncio.Event()

    def start(self) -> None:
        self._writer = asyncio.create_task(self._write_loop(), name=f"ws-writer-{self.id}")

    def send_frame(self, frame: str, size: int | None = None, arrived: float | None = None) -> None:
        """Queue a frame; past the bound the client can't keep up, so it is dropped (1013).

        One frame larger than the bound may still go out when nothing else is owed. `arrived`: when its
        event arrived (default: now).
        """
        self._unsent.clear()  # deltas queued before this frame stay before it
        self._hurry.set()
        self._enqueue(_Queued(frame, utf8_size(frame) if size is None else size, _now_or(arrived), None))

    def send_delta(
        self, frame: str, size: int, arrived: float | None, message_id: str, generation: int, offset: int
    ) -> bool:
        """Queue an append delta of `message_id` that brings the client to draft `generation`, its text going at
        `offset` of the client's draft. When the message's delta still waits (`unsent_offset`), this one takes
        its place and keeps its arrival: then it must bring the client from the draft that one started from
        (`pheby.protocol.append` folds the two). Whether a frame of its own was queued."""
        self._drafts[message_id] = generation
        waiting = self._unsent.get(message_id)
        if waiting is None:
            queued = _Queued(frame, size, _now_or(arrived), message_id, offset)
            if not self._enqueue(queued):
                return False
            self._unsent[message_id] = queued
            return True
        if self._owed_bytes - waiting.size + size > self._max_bytes:
            self._overflow("bytes owed past the bound")
            return False
        metrics.DELTAS_FOLDED.inc()
        self._owed_bytes += size - waiting.size
        waiting.frame, waiting.size, waiting.offset = frame, size, offset  # in place: its turn in the queue stays
        return False

    def unsent_offset(self, message_id: str) -> int | None:
        """Where the message's append delta still waiting in the queue goes in the client's draft (None: none
        waits, or another frame was queued after it)."""
        waiting = self._unsent.get(message_id)
        return None if waiting is None else waiting.offset

    def holds_unsent_delta(self, message_id: str) -> bool:
        """Whether an append delta of the message waits in the queue, not yet being written, with nothing after
        it that must stay after it: a newer one is folded into it."""
        return message_id in self._unsent

    def draft_generation(self, message_id: str) -> int | None:
        return self._drafts.get(message_id)

    def forget_draft(self, message_id: str) -> None:
        """The client's draft of the message is no longer the last one sent (a snapshot replaced it, or the
        message ended): its next delta carries the whole text, queued on its own."""
        self._drafts.pop(message_id, None)
        self._unsent.pop(message_id, None)

    def _enqueue(self, queued: _Queued) -> bool:
        if self.closed.is_set():
            return False
        if self._owed_bytes and self._owed_bytes + queued.size > self._max_bytes:
            self._overflow("bytes owed past the bound")
            return False
        if len(self._queue) >= self._max_frames:
            self._overflow("send queue full")
            return False
        self._queue.append(queued)
        self._queued.set()
        self._owed_bytes += queued.size
        return True

    def send(self, event: Event) -> None:
        encoded = encode_event(event)
        metrics.frames_sent(event.__struct_config__.tag).inc()
        self.send_frame(encoded.decode(), len(encoded))

    @property
    def owed_bytes(self) -> int:
        return self._owed_bytes

    def revoke(self, message: str) -> None:
        """The credential stopped working: an `unauthorized` error, then a 1008 close; queued frames are dropped."""
        self.revoked = True
        if self.closed.is_set():
            return
        frame = encode_event(error_event("unauthorized", message)).decode()
        self._begin_close(CLOSE_POLICY_VIOLATION, "unauthorized", frame)

    def restart(self, reason: str) -> None:
        """Close with 1012 (service restart): the client reconnects, and takes a fresh snapshot."""
        if not self.closed.is_set():
            self._begin_close(CLOSE_SERVICE_RESTART, reason)

    async def drain_and_stop(self) -> None:
        """Let queued frames go out, then stop the writer (and let a close under way finish)."""
        if self._writer is None:
            return
        if not self.closed.is_set():
            self._queue.append(None)
            self._queued.set()
            self._hurry.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._writer), timeout=5)
        except (TimeoutError, asyncio.CancelledError):
            self._writer.cancel()
        if self._closing is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._closing), timeout=REVOKED_SEND_SECONDS + 5)
            except (TimeoutError, asyncio.CancelledError):
                self._closing.cancel()

    async def _write_loop(self) -> None:
        unpaced = 0  # frames to write before the pace is looked at again: those queued when it last let go
        try:
            while True:
                while not self._queue:
                    self._queued.clear()
                    await self._queued.wait()
                if self._delta_pace and not unpaced:
                    await self._keep_pace()
                    unpaced = len(self._queue)
                unpaced = max(0, unpaced - 1)
                item = self._queue.popleft()  # out of the queue while it is written: no longer folded into
                if item is None or self.closed.is_set():
                    return
                if (message_id := self._folded_into(item)) is not None:
                    del self._unsent[message_id]
                await self._send_text(item.frame)
                self._owed_bytes -= item.size
                metrics.EVENT_TO_FRAME.observe(time.monotonic() - item.arrived)
        except Exception:  # noqa: BLE001 - the socket went away; the reader loop sees the disconnect too
            self.closed.set()

    def _folded_into(self, item: _Queued) -> str | None:
        """The message whose newer deltas are still folded into `item` (None: `item` takes no more)."""
        message_id = item.delta_of
        return message_id if message_id is not None and self._unsent.get(message_id) is item else None

    async def _keep_pace(self) -> None:
        """Hold an append delta at the head of the queue, which newer deltas are still folded into, until the
        pace allows one (or a frame it must precede is queued); then the queue goes out whole, and the next
        pace starts."""
        head = self._queue[0]
        if head is None or self._folded_into(head) is None:
            return
        wait = self._paced_until - time.monotonic()
        if wait > 0:
            self._hurry.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._hurry.wait()
        self._paced_until = time.monotonic() + self._delta_pace

    def _overflow(self, why: str) -> None:
        log.warning("closing slow WebSocket connection %s: %s", self.id, why)
        metrics.BACKPRESSURE_CLOSES.inc()
        self._begin_close(CLOSE_TRY_AGAIN_LATER, "send queue overflow")

    def _begin_close(self, code: int, reason: str, last_frame: str | None = None) -> None:
        self.closed.set()
        self._closing = asyncio.get_running_loop().create_task(
            self._close_quietly(code, reason, last_frame), name=f"ws-close-{self.id}"
        )

    async def _close_quietly(self, code: int, reason: str, last_frame: str | None) -> None:
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
        try:
            if last_frame is not None:
                await asyncio.wait_for(self._send_text(last_frame), timeout=REVOKED_SEND_SECONDS)
        except Exception:  # noqa: BLE001 - a peer that doesn't read gets the close anyway
            log.debug("last frame to %s not sent", self.id)
        try:
            await self._close(code, reason)
        except Exception:  # noqa: BLE001 - already gone
            log.debug("close of %s failed", self.id)


class Hub:
    """Every live connection, by account, and the count of open sockets (said hello or not)."""

    def __init__(self, max_sockets: int = MAX_SOCKETS, max_per_account: int = MAX_CONNECTIONS_PER_ACCOUNT) -> None:
        self._by_account: defaultdict[str, set[Connection]] = defaultdict(set)
        self._max_sockets = max_sockets
        self._max_per_account = max_per_account
        self._sockets = 0
        self._listeners: list[Listener] = []
        self._append_drafts = AppendDrafts()

    def claim_socket(self) -> bool:
        """Count a new socket in; False (and not counted) when the server already holds its cap."""
        if self._sockets >= self._max_sockets:
            return False
        self._sockets += 1
        return True

    def release_socket(self) -> None:
        self._sockets -= 1

    def add(self, connection: Connection) -> None:
        """Register an authenticated connection; `RateLimited` when its account already holds its cap."""
        if self.connections(connection.account_id) >= self._max_per_account:
            raise RateLimited(
                f"An account may hold at most {self._max_per_account} connections; close one and try again"
            )
        self._by_account[connection.account_id].add(connection)

    def remove(self, connection: Connection) -> None:
        group = self._by_account.get(connection.account_id)
        if group is not None:
            group.discard(connection)
            if not group:
                del self._by_account[connection.account_id]

    async def joined(self, account_id: str) -> None:
        """Return once events broadcast anywhere reach the account's connections here (at once: one process)."""

    async def settled(self, account_id: str) -> None:
        """Return once nothing the account broadcast is still on its way to its connections (at once here:
        a broadcast is queued before it returns). Awaited right before a snapshot is read."""

    def stamp_with(self, stamper: Stamper) -> None:
        """Who stamps the events this hub logs (a hub with no log has nothing to stamp)."""

    async def settled_position(self, account_id: str) -> int:
        """After `settled`: a position in the account's event log that every event broadcast here so far has
        reached, read with nothing broadcast here since (0: one process, no log). A snapshot taken right
        after it, with no await, holds exactly this process's events up to it."""
        await self.settled(account_id)
        return 0

    async def reached(self, account_id: str, position: int) -> bool:
        """Deliver the account's logged events up to `position` to its connections here; whether they are."""
        return True

    def delivered_after(self, account_id: str, position: int, conversation_id: str) -> bool:
        """Whether an event of the conversation reached the account's connections here after `position` (or
        whether that can't be told)."""
        return False

    def listen(self, listener: Listener) -> None:
        """Have `listener(account_id, event)` see every event broadcast (connected clients or not), after
        it is queued; it must not block (`pheby.push` queues its notices)."""
        self._listeners.append(listener)

    def broadcast(self, account_id: str, event: Event) -> None:
        """Send `event` to every connection of `account_id` and to no one else."""
        self.deliver(account_id, event, None)

    def deliver(self, account_id: str, event: Event, form: DeltaForm | None) -> None:
        """Send `event` to the connections of `account_id` that take `form` of `message.delta` (None: all of
        them), each delta in its connection's form; listeners see it unless `form` is "append" (they see
        each event once, with the cumulative connections)."""
        group = self._by_account.get(account_id)
        if group:
            arrived = EVENT_ARRIVED.get()
            if not isinstance(event, MessageDelta):
                self._send_to(group, event, arrived)
            else:
                appending = [c for c in group if c.delta_append]
                if appending and form != "cumulative":
                    queued = self._append_drafts.send(appending, event, arrived)
                    metrics.frames_sent(event.__struct_config__.tag).inc(queued)
                if form != "append":
                    self._send_to([c for c in group if not c.delta_append] if appending else group, event, arrived)
        self._append_drafts.settle(self._by_account.get(account_id, ()), event)
        if form != "append":
            for listener in self._listeners:
                listener(account_id, event)

    @staticmethod
    def _send_to(connections: Collection[Connection], event: Event, arrived: float | None) -> None:
        if not connections:
            return
        encoded = encode_event(event)
        frame, size = encoded.decode(), len(encoded)
        for connection in list(connections):
            connection.send_frame(frame, size, arrived)
        metrics.frames_sent(event.__struct_config__.tag).inc(len(connections))

    def delta_forms(self, account_id: str) -> tuple[bool, bool]:
        """Whether the account's deltas are wanted cumulative, and whether in append form: cumulative
        unless every connection asked for append deltas (an account with no connection counts as
        cumulative: `CoalescingHub` still paces its runs' reader at that window)."""
        connections = self._by_account.get(account_id, ())
        append = sum(1 for c in connections if c.delta_append)
        return (not connections or append < len(connections)), append > 0

    def in_foreground(self, account_id: str) -> bool:
        """Whether any connection of the account is in front of its user."""
        return any(c.foreground and not c.closed.is_set() for c in self._by_account.get(account_id, ()))

    async def foreground_elsewhere(self, account_id: str) -> bool:
        """Whether another process has a connection of the account in front of its person (one process:
        never)."""
        return False

    def accounts(self) -> list[str]:
        """The accounts with a connection here."""
        return list(self._by_account)

    def delta_held_for(self, message_id: str) -> float:
        """Seconds a `message.delta` of the message broadcast now would be held back before it reaches
        the clients (this hub sends every event at once; `CoalescingHub` holds deltas back)."""
        return 0.0

    def send_held_delta(self, message_id: str, within: float) -> None:
        """Send the message's held-back deltas whose windows end within `within` seconds now (`CoalescingHub`;
        nothing here)."""

    def connections(self, account_id: str) -> int:
        return len(self._by_account.get(account_id, ()))

    def sockets(self) -> int:
        """Sockets open, said hello or not."""
        return self._sockets

    def connection_count(self) -> int:
        return sum(len(group) for group in self._by_account.values())

    def owed_bytes(self) -> int:
        """What every connection owes its client, together."""
        return sum(c.owed_bytes for group in self._by_account.values() for c in group)

    def of_account(self, account_id: str) -> list[Connection]:
        return list(self._by_account.get(account_id, ()))

    def all_connections(self) -> list[Connection]:
        return [c for group in self._by_account.values() for c in group]

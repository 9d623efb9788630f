"""`ClusterHub`: the hub of one process among several, its accounts' events shared through the event log.

Every event but a run's streaming text is logged (`pheby.events.log`) and delivered from the log, in seq
order, to every process with a socket of the account: each connection gets each logged event exactly
once, whichever process broadcast it. The process that broadcast an event appends it, then hands it
to its own feed (`Feed.offer`), which delivers it at once when nothing is owed before it. The
streaming text (`message.delta`) is never logged: it goes to this process's connections at once and
to the others through the bell's live messages (`pheby.cluster.outbox`), each naming the seq it
follows, so it never overtakes the event it came after; a delta of a message that has ended meanwhile
is dropped.

The account's logged events leave this process in the order they were broadcast (those that pile up
behind an append are appended together); a delta waits only behind its own conversation's events.
`settled(account)` waits until nothing is waiting, so a snapshot read right after it holds what was
broadcast before it, and every later event reaches the client after the snapshot. No broadcast waits
for Redis: rings and text are published by the bell outbox.

Only the process that broadcast an event tells its listeners (Web Push): one notice per event for the
whole cluster.
"""

import asyncio
import itertools
import logging
import uuid
from collections import Counter, OrderedDict, deque
from typing import Any, Final

import msgspec

from pheby import metrics
from pheby.cancelling import cancel_and_wait
from pheby.cluster.backlog import Backlog
from pheby.cluster.outbox import BellOutbox
from pheby.cluster.presence import RENEW_SECONDS as PRESENCE_RENEW_SECONDS
from pheby.cluster.presence import Presence
from pheby.cluster.wire import decode_live, decode_logged, logged_payload
from pheby.db import Connection as DbConnection
from pheby.errors import DatabaseError, DatabaseUnavailable
from pheby.events import Appender, EventLog, Feed, Live
from pheby.events import Event as LoggedEvent
from pheby.protocol.coalesce import CoalescingHub
from pheby.protocol.frames import Event, MessageComplete, MessageDelta, RunFinished
from pheby.protocol.hub import Connection, Listener, Stamp, Stamper, utf8_size

__all__ = ["ClusterHub"]

log = logging.getLogger(__name__)

APPEND_PATIENCE_SECONDS: Final = 10.0
APPEND_RETRY_PAUSE: Final = 0.25
SUBSCRIBE_RETRY_PAUSE: Final = 0.5
SETTLE_SECONDS: Final = 5.0  # how long a snapshot waits for its account's broadcasts to go out
JOIN_SECONDS: Final = 5.0  # how long a hello waits for its account's subscription before `ready` goes anyway
APPEND_BATCH_MAX: Final = 64  # logged events appended in one transaction at most
# Per account, deltas waiting behind an event being appended; past either bound they are skipped.
WAITING_DELTAS_MAX: Final = 1024
WAITING_DELTA_BYTES: Final = 8 * 1024 * 1024
SETTLE_TRIES: Final = 3  # reads of the log's head until none of this process's appends overtook it
RECENT_EVENTS: Final = 256  # per account, the seqs delivered last remembered with their conversations
MESSAGES_MAX: Final = 10_000  # streaming and ended messages remembered (a late delta of an ended one is dropped)


class ClusterHub(CoalescingHub):
    """`CoalescingHub` whose broadcasts reach every process holding a socket of the account.

    `log`: the event log, with the bell (`log.bell`) every process of the deployment shares;
    `append_patience`: how long an event waits for the database before it goes to this process's
    connections and waits in the backlog (`pheby.cluster.backlog`). Other arguments go to `CoalescingHub`.
    `start` before use, `aclose` after."""

    def __init__(
        self,
        *args: Any,
        log: EventLog,
        origin: str | None = None,
        append_patience: float = APPEND_PATIENCE_SECONDS,
        presence: Presence | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._append_patience = append_patience
        if log.bell is None:
            raise ValueError("ClusterHub needs an event log with a bell")
        self.origin = origin or uuid.uuid4().hex
        self.presence = presence  # the accounts in front of their person on other processes (Web Push)
        if presence is not None:
            presence.origin = self.origin
        self._presenting: asyncio.Task[None] | None = None
        self.event_log = log
        self.feed = Feed(log, log.bell, self._on_logged, self._on_truncated, on_live=self._on_live)
        self.outbox = BellOutbox(log.bell, self.origin)
        self.backlog = Backlog(log, self._now_known)
        self._waiting: dict[str, deque[Event]] = {}  # by account: broadcast, not yet sent on
        self._senders: dict[str, asyncio.Task[None]] = {}  # by account: the task sending `_waiting` on
        self._waiting_delta_bytes: Counter[str] = Counter()  # by account: the text of its waiting deltas
        self._subscriptions: dict[str, asyncio.Task[None]] = {}  # by account with a socket here
        self._unsubscribing: set[asyncio.Task[None]] = set()
        self._known: dict[str, int] = {}  # by account: the newest seq appended or delivered here
        # The stamps of the logged events waiting in `_waiting` (by the event's id while it waits there).
        self._stamps: dict[int, Stamp] = {}
        self._stamper: Stamper = lambda account_id, event: None
        # By account: the seqs delivered here last, with their conversations (`delivered_after`).
        self._recent: dict[str, deque[tuple[int, str | None]]] = {}
        self._streaming: OrderedDict[str, str] = OrderedDict()  # message id → its conversation, while it streams
        self._ended: OrderedDict[str, None] = OrderedDict()  # messages whose text is final
        # (account, conversation) → its events waiting in `_waiting`: a delta of a conversation with none
        # goes out at once, past the account's other conversations' events being appended.
        self._queued_of: Counter[tuple[str, str]] = Counter()
        self._telling = True  # whether listeners hear the event being delivered (False: another process's)

    async def start(self) -> None:
        await self.feed.start()
        self.outbox.start()
        if self.presence is not None:
            self._presenting = asyncio.create_task(self._present(self.presence), name="cluster-presence")

    async def _present(self, presence: Presence) -> None:
        while True:
            await presence.publish({account for account in self.accounts() if self.in_foreground(account)})
            await asyncio.sleep(PRESENCE_RENEW_SECONDS)

    async def foreground_elsewhere(self, account_id: str) -> bool:
        return self.presence is not None and await self.presence.elsewhere(account_id)

    async def aclose(self) -> None:
        """Send on what waits (bounded by the appends' own patience), then stop."""
        senders = list(self._senders.values())
        if senders:
            await asyncio.wait(senders, timeout=self._append_patience + 1)
        for task in [*self._senders.values(), *self._subscriptions.values(), *self._unsubscribing]:
            task.cancel()
        await asyncio.gather(
            *self._senders.values(), *self._subscriptions.values(), *self._unsubscribing, return_exceptions=True
        )
        await cancel_and_wait(self._presenting)
        if self.presence is not None:
            await self.presence.aclose()
        await self.outbox.aclose()
        await self.backlog.aclose()
        await self.feed.aclose()

    # --- connections and their accounts' subscriptions ---------------------------------------------

    def add(self, connection: Connection) -> None:
        super().add(connection)
        account_id = connection.account_id
        if account_id not in self._subscriptions:
            self._subscriptions[account_id] = asyncio.create_task(
                self._subscribe(account_id), name=f"cluster-subscribe-{account_id}"
            )

    def remove(self, connection: Connection) -> None:
        super().remove(connection)
        account_id = connection.account_id
        if self.connections(account_id) == 0 and account_id in self._subscriptions:
            self._subscriptions.pop(account_id).cancel()
            task = asyncio.get_running_loop().create_task(self._unsubscribe(account_id))
            self._unsubscribing.add(task)
            task.add_done_callback(self._unsubscribing.discard)

    async def joined(self, account_id: str) -> None:
        """Wait (a bounded time) until the account's events from every process reach this one."""
        task = self._subscriptions.get(account_id)
        if task is not None and not task.done():
            await asyncio.wait([task], timeout=JOIN_SECONDS)

    async def _subscribe(self, account_id: str) -> None:
        while True:  # until it works, or the account's last socket here goes (cancelled)
            try:
                position = await self.feed.subscribe(account_id)
            except DatabaseError:
                await asyncio.sleep(SUBSCRIBE_RETRY_PAUSE)
                continue
            self._now_known(account_id, position)
            return

    async def _unsubscribe(self, account_id: str) -> None:
        if account_id in self._subscriptions:
            return  # a socket of the account said hello again meanwhile
        await self.feed.unsubscribe(account_id)
        if account_id not in self._subscriptions:
            self._known.pop(account_id, None)
            self._recent.pop(account_id, None)

    # --- broadcasting ------------------------------------------------------------------------------

    def listen(self, listener: Listener) -> None:
        def told(account_id: str, event: Event) -> None:
            if self._telling:
                listener(account_id, event)

        super().listen(told)

    def broadcast(self, account_id: str, event: Event) -> None:
        waiting = self._waiting.get(account_id)
        if isinstance(event, MessageDelta) and not self._queued_of[(account_id, event.conversation_id)]:
            self._send_delta(account_id, event)  # nothing of its conversation is still on its way
            return
        if waiting is None:
            waiting = self._waiting[account_id] = deque()
            self._senders[account_id] = asyncio.create_task(
                self._send_waiting(account_id, waiting), name=f"cluster-send-{account_id}"
            )
        if isinstance(event, MessageDelta):
            size = utf8_size(event.text)
            if len(waiting) >= WAITING_DELTAS_MAX or self._waiting_delta_bytes[account_id] + size > WAITING_DELTA_BYTES:
                return  # cumulative: a later delta, or the message's end, carries this text
            self._waiting_delta_bytes[account_id] += size
        elif (stamp := self._stamper(account_id, event)) is not None:
            self._stamps[id(event)] = stamp  # taken now: where its run is as it goes out
        waiting.append(event)
        self._queued_of[_conversation_of(account_id, event)] += 1

    def stamp_with(self, stamper: Stamper) -> None:
        self._stamper = stamper

    async def settled(self, account_id: str) -> None:
        """Return once nothing the account broadcast here is still on its way to its connections (or after
        `SETTLE_SECONDS`, should its events never stop coming)."""
        deadline = asyncio.get_running_loop().time() + SETTLE_SECONDS
        while (sender := self._senders.get(account_id)) is not None:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            await asyncio.wait([sender], timeout=left)

    def _send_delta(self, account_id: str, delta: MessageDelta) -> None:
        self._streams(delta)
        CoalescingHub.broadcast(self, account_id, delta)
        self.outbox.put_delta(account_id, self._known.get(account_id, 0), delta)

    async def _send_waiting(self, account_id: str, waiting: deque[Event]) -> None:
        """Send the account's waiting events on, in order: a delta as it comes; the logged events that wait
        one after another appended together, in one transaction (batching only when appends fall behind)."""
        try:
            while waiting:
                if isinstance(waiting[0], MessageDelta):
                    batch: list[Event] = [waiting[0]]
                    self._send_delta(account_id, waiting[0])
                    self._waiting_delta_bytes[account_id] -= utf8_size(waiting[0].text)
                else:
                    batch = list(itertools.takewhile(lambda e: not isinstance(e, MessageDelta), waiting))
                    batch = batch[:APPEND_BATCH_MAX]
                    try:
                        await self._send_logged(account_id, batch)
                    except Exception:
                        log.exception("an event's delivery failed; the log's readers deliver it")
                for event in batch:
                    waiting.popleft()
                    self._queued_of[_conversation_of(account_id, event)] -= 1
        finally:
            for event in waiting:  # cancelled: what never went out takes no stamp with it
                self._stamps.pop(id(event), None)
            del self._waiting[account_id]
            del self._senders[account_id]
            self._waiting_delta_bytes.pop(account_id, None)
            self._queued_of = +self._queued_of  # drop the zeros

    async def _send_logged(self, account_id: str, events: list[Event]) -> None:
        entries = [(_kind(event), logged_payload(self.origin, event)) for event in events]
        stamps = [self._stamps.pop(id(event), None) for event in events]
        try:
            logged = await self._append(account_id, entries, stamps) if not self.backlog.waiting else None
        except DatabaseError:  # not an outage (the account is gone, say): its clients here get them, unlogged
            log.exception("events could not be logged")
            metrics.EVENTS_UNLOGGED.inc(len(events))
            for event in events:
                self._deliver(account_id, event, told=True)
            return
        if logged is None:  # the database is down: this process's clients now, the others once it is back
            for (kind, payload), event in zip(entries, events, strict=True):
                self.backlog.add(account_id, kind, payload)
                self._deliver(account_id, event, told=True)
            return
        subscription = self._subscriptions.get(account_id)
        if subscription is not None and not subscription.done():
            await self.joined(account_id)  # else its catch-up and this could both deliver the events
        for entry, event, stamp in zip(logged, events, stamps, strict=True):
            if entry is None:  # its run is another process's now, which reads it again from Hermes
                if stamp is not None:
                    stamp.refused()
            elif not await self.feed.offer(entry):
                self._deliver(account_id, event, told=True)  # no socket here follows the log

    async def _append(
        self, account_id: str, entries: list[tuple[str, dict[str, Any]]], stamps: list[Stamp | None]
    ) -> list[LoggedEvent | None] | None:
        """Append the entries (kind, payload) in one transaction, each after its stamp's write (an entry whose
        stamp refuses is dropped: None), waiting up to `append_patience` for the database; None if it stayed
        down."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._append_patience

        def append(conn: DbConnection, appender: Appender) -> list[int | None]:
            return [
                appender.append(account_id, kind, payload) if stamp is None or stamp.write(conn) else None
                for (kind, payload), stamp in zip(entries, stamps, strict=True)
            ]

        while True:
            try:
                seqs = await self.event_log.transaction(
                    append,
                    ring_now=False,  # the outbox rings: no broadcast here waits for Redis
                )
            except DatabaseUnavailable:
                if loop.time() >= deadline:
                    return None
                await asyncio.sleep(APPEND_RETRY_PAUSE)
                continue
            appended = [seq for seq in seqs if seq is not None]
            if appended:
                self._now_known(account_id, appended[-1])
                self.outbox.put_ring(account_id, appended[-1])
            return [
                None if seq is None else LoggedEvent(account_id, seq, kind, payload, 0.0)
                for seq, (kind, payload) in zip(seqs, entries, strict=True)
            ]

    def _now_known(self, account_id: str, seq: int) -> None:
        self._known[account_id] = max(self._known.get(account_id, 0), seq)

    # --- snapshots taken on one process of runs another owns ----------------------------------------

    async def settled_position(self, account_id: str) -> int:
        for _ in range(SETTLE_TRIES):
            await self.settled(account_id)
            head = (await self.event_log.heads([account_id]))[account_id]
            await self.settled(account_id)
            if self._known.get(account_id, 0) <= head:  # nothing of this process's was appended past it meanwhile
                return head
        return self._known.get(account_id, 0)  # busy: the newest known; the snapshot's reader checks again

    async def reached(self, account_id: str, position: int) -> bool:
        if (self.feed.position(account_id) or 0) < position:
            await self.feed.catch_up(account_id)
        return (self.feed.position(account_id) or 0) >= position

    def delivered_after(self, account_id: str, position: int, conversation_id: str) -> bool:
        recent = self._recent.get(account_id)
        delivered = self.feed.position(account_id) or 0
        if delivered <= position:
            return False
        if not recent or recent[0][0] > position + 1:
            return True  # what came after it is no longer remembered here
        return any(seq > position and conversation == conversation_id for seq, conversation in recent)

    # --- what the feed delivers --------------------------------------------------------------------

    async def _on_logged(self, logged: LoggedEvent) -> None:
        try:
            origin, event, early = decode_logged(logged.payload)
        except (msgspec.ValidationError, KeyError, TypeError):
            log.warning("event log: an event of kind %r could not be read; skipped", logged.kind)
            return
        self._now_known(logged.account_id, logged.seq)
        recent = self._recent.get(logged.account_id)
        if recent is None:
            recent = self._recent[logged.account_id] = deque(maxlen=RECENT_EVENTS)
        recent.append((logged.seq, getattr(event, "conversation_id", None)))
        if origin == self.origin and early:
            return  # from the backlog: delivered here when it was broadcast
        self._deliver(logged.account_id, event, told=origin == self.origin)

    async def _on_live(self, live: Live) -> None:
        try:
            origin, delta = decode_live(live.data)
        except msgspec.DecodeError:
            return
        if origin == self.origin or delta.message_id in self._ended:
            return  # sent here already; or its message ended (the end carries the whole text)
        self._streams(delta)
        self._deliver(live.account_id, delta, told=False)

    async def _on_truncated(self, account_id: str) -> None:
        """This process fell behind what the log keeps: its sockets of the account reconnect for a snapshot."""
        for connection in self.of_account(account_id):
            connection.restart("events missed; reconnect for a fresh snapshot")

    def _deliver(self, account_id: str, event: Event, *, told: bool) -> None:
        if isinstance(event, MessageComplete):
            self._end(event.message_id)
        elif isinstance(event, RunFinished):
            for message_id, conversation_id in list(self._streaming.items()):
                if conversation_id == event.conversation_id:
                    self._end(message_id)
        self._telling = told
        try:
            CoalescingHub.broadcast(self, account_id, event)
        finally:
            self._telling = True

    def _streams(self, delta: MessageDelta) -> None:
        self._streaming[delta.message_id] = delta.conversation_id
        self._streaming.move_to_end(delta.message_id)
        while len(self._streaming) > MESSAGES_MAX:
            self._streaming.popitem(last=False)

    def _end(self, message_id: str) -> None:
        self._streaming.pop(message_id, None)
        self._ended[message_id] = None
        while len(self._ended) > MESSAGES_MAX:
            self._ended.popitem(last=False)


def _kind(event: Event) -> str:
    kind = event.__struct_config__.tag
    assert isinstance(kind, str)
    return kind


def _conversation_of(account_id: str, event: Event) -> tuple[str, str]:
    """The (account, conversation) an event belongs to; conversation "" for an account-wide one."""
    return account_id, str(getattr(event, "conversation_id", ""))

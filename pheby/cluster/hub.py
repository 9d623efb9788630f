"""`ClusterHub`: the hub of one process among several, its accounts' events shared through the event log.

Every event but a run's streaming text is logged (`pheby.events.log`) and delivered from the log, in seq
order, to every process with a socket of the account: each connection gets each logged event exactly
once, whichever process broadcast it. The process that broadcast an event appends it, then hands it
to its own feed (`Feed.offer`), which delivers it at once when nothing is owed before it. The
streaming text (`message.delta`) is never logged: it goes to this process's connections at once and
to the others through the bell's live messages (`pheby.cluster.outbox`), each naming the seq it
follows, so it never overtakes the event it came after; a delta of a message that has ended meanwhile
is dropped.

The account's events leave this process in the order they were broadcast: while one is being
appended, what the account broadcasts after it (text included) waits behind it. `settled(account)`
waits until nothing is waiting, so a snapshot read right after it holds what was broadcast before it,
and every later event reaches the client after the snapshot.

Only the process that broadcast an event tells its listeners (Web Push): one notice per event for the
whole cluster.
"""

import asyncio
import logging
import uuid
from collections import OrderedDict, deque
from typing import Any, Final

import msgspec

from pheby import metrics
from pheby.cluster.outbox import LiveOutbox
from pheby.cluster.wire import decode_live, decode_logged, logged_payload
from pheby.errors import DatabaseError, DatabaseUnavailable
from pheby.events import Event as LoggedEvent
from pheby.events import EventLog, Feed, Live
from pheby.protocol.coalesce import CoalescingHub
from pheby.protocol.frames import Event, MessageComplete, MessageDelta, RunFinished
from pheby.protocol.hub import Connection, Listener

__all__ = ["ClusterHub"]

log = logging.getLogger(__name__)

APPEND_RETRY_SECONDS: Final = 10.0  # how long an event waits for the database before it goes out unlogged
APPEND_RETRY_PAUSE: Final = 0.25
SUBSCRIBE_RETRY_PAUSE: Final = 0.5
JOIN_SECONDS: Final = 5.0  # how long a hello waits for its account's subscription before `ready` goes anyway
WAITING_DELTAS_MAX: Final = 1024  # per account, behind an event being appended; past it deltas are skipped
MESSAGES_MAX: Final = 10_000  # streaming and ended messages remembered (a late delta of an ended one is dropped)


class ClusterHub(CoalescingHub):
    """`CoalescingHub` whose broadcasts reach every process holding a socket of the account.

    `log`: the event log, with the bell (`log.bell`) every process of the deployment shares. Other
    arguments go to `CoalescingHub`. `start` before use, `aclose` after."""

    def __init__(self, *args: Any, log: EventLog, origin: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if log.bell is None:
            raise ValueError("ClusterHub needs an event log with a bell")
        self.origin = origin or uuid.uuid4().hex
        self.event_log = log
        self.feed = Feed(log, log.bell, self._on_logged, self._on_truncated, on_live=self._on_live)
        self.outbox = LiveOutbox(log.bell, self.origin)
        self._waiting: dict[str, deque[Event]] = {}  # by account: broadcast, not yet sent on
        self._senders: dict[str, asyncio.Task[None]] = {}  # by account: the task sending `_waiting` on
        self._subscriptions: dict[str, asyncio.Task[None]] = {}  # by account with a socket here
        self._unsubscribing: set[asyncio.Task[None]] = set()
        self._known: dict[str, int] = {}  # by account: the newest seq appended or delivered here
        self._streaming: OrderedDict[str, str] = OrderedDict()  # message id → its conversation, while it streams
        self._ended: OrderedDict[str, None] = OrderedDict()  # messages whose text is final
        self._telling = True  # whether listeners hear the event being delivered (False: another process's)

    async def start(self) -> None:
        await self.feed.start()
        self.outbox.start()

    async def aclose(self) -> None:
        """Send on what waits (bounded by the appends' own patience), then stop."""
        senders = list(self._senders.values())
        if senders:
            await asyncio.wait(senders, timeout=APPEND_RETRY_SECONDS + 1)
        for task in [*self._senders.values(), *self._subscriptions.values(), *self._unsubscribing]:
            task.cancel()
        await asyncio.gather(
            *self._senders.values(), *self._subscriptions.values(), *self._unsubscribing, return_exceptions=True
        )
        await self.outbox.aclose()
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
            self._known[account_id] = max(self._known.get(account_id, 0), position)
            return

    async def _unsubscribe(self, account_id: str) -> None:
        await self.feed.unsubscribe(account_id)
        if account_id not in self._subscriptions:
            self._known.pop(account_id, None)

    # --- broadcasting ------------------------------------------------------------------------------

    def listen(self, listener: Listener) -> None:
        def told(account_id: str, event: Event) -> None:
            if self._telling:
                listener(account_id, event)

        super().listen(told)

    def broadcast(self, account_id: str, event: Event) -> None:
        waiting = self._waiting.get(account_id)
        if waiting is None and isinstance(event, MessageDelta):
            self._send_delta(account_id, event)  # nothing before it is still on its way
            return
        if waiting is None:
            waiting = self._waiting[account_id] = deque()
            self._senders[account_id] = asyncio.create_task(
                self._send_waiting(account_id, waiting), name=f"cluster-send-{account_id}"
            )
        if isinstance(event, MessageDelta) and len(waiting) >= WAITING_DELTAS_MAX:
            return  # cumulative: a later delta, or the message's end, carries this text
        waiting.append(event)

    async def settled(self, account_id: str) -> None:
        """Return once nothing the account broadcast here is still on its way to its connections."""
        while (sender := self._senders.get(account_id)) is not None:
            await asyncio.wait([sender])

    def _send_delta(self, account_id: str, delta: MessageDelta) -> None:
        self._streams(delta)
        CoalescingHub.broadcast(self, account_id, delta)
        self.outbox.put(account_id, self._known.get(account_id, 0), delta)

    async def _send_waiting(self, account_id: str, waiting: deque[Event]) -> None:
        try:
            while waiting:
                event = waiting[0]
                if isinstance(event, MessageDelta):
                    self._send_delta(account_id, event)
                else:
                    try:
                        await self._send_logged(account_id, event)
                    except Exception:
                        log.exception("an event's delivery failed; the log's readers deliver it")
                waiting.popleft()
        finally:
            del self._waiting[account_id]
            del self._senders[account_id]

    async def _send_logged(self, account_id: str, event: Event) -> None:
        await self.outbox.flush(account_id)  # the text before it reaches the other processes before it
        logged = await self._append(account_id, event)
        subscription = self._subscriptions.get(account_id)
        if subscription is not None and not subscription.done():
            await self.joined(account_id)  # else its catch-up and this could both deliver the event
        if logged is None or not await self.feed.offer(logged):
            self._deliver(account_id, event, told=True)  # no socket here follows the log, or it is down

    async def _append(self, account_id: str, event: Event) -> LoggedEvent | None:
        payload = logged_payload(self.origin, event)
        kind = event.__struct_config__.tag
        assert isinstance(kind, str)
        deadline = asyncio.get_running_loop().time() + APPEND_RETRY_SECONDS
        while True:
            try:
                seq = await self.event_log.append(account_id, kind, payload)
            except DatabaseError as e:
                if not isinstance(e, DatabaseUnavailable) or asyncio.get_running_loop().time() >= deadline:
                    metrics.EVENTS_UNLOGGED.inc()
                    log.warning("an event could not be logged: only this process's clients get it")
                    return None
                await asyncio.sleep(APPEND_RETRY_PAUSE)
                continue
            self._known[account_id] = max(self._known.get(account_id, 0), seq)
            return LoggedEvent(account_id, seq, kind, payload, 0.0)

    # --- what the feed delivers --------------------------------------------------------------------

    async def _on_logged(self, logged: LoggedEvent) -> None:
        try:
            origin, event = decode_logged(logged.payload)
        except (msgspec.ValidationError, KeyError, TypeError):
            log.warning("event log: an event of kind %r could not be read; skipped", logged.kind)
            return
        self._known[logged.account_id] = max(self._known.get(logged.account_id, 0), logged.seq)
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

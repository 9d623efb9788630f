"""The bell: a ring says "account A's log reached seq N"; it never carries the event itself.

Rings are an unreliable transport, at most once: one may be lost (Redis down, a connection dropped, a
queue full) and the reader never misses an event for it, because the event is in the log and the feed
(`pheby.events.feed`) reads it from there. What a bell owes its one consumer is the honest signal: after
anything that may have lost rings (a lost connection, a reconnect, a full queue) `receive` answers `RESYNC`; the
consumer re-reads every position it holds.

`LocalBell` rings within one process (one server, no Redis). `RedisBell` rings through Redis pub/sub,
one channel per account under a key prefix, with a subscriber connection of its own that it keeps up:
a connection error (or a PING unanswered) closes it, and a new one is made after a bounded backoff,
every subscribed account subscribed again, then `RESYNC`. It never gives up.

The same connection carries `Live` messages: what is published only, never logged (a run's text while
it streams), with the seq of the account's log it follows. They are as unreliable as rings and are
dropped, never queued past `LIVE_BYTES`: each one carries a run's whole text so far, so the next one
(or the logged event that ends the text) makes up for a lost one.

It also carries `Letter`s: messages for one process, not for an account (a run's command for the process
that owns the run, and its answer), to the addresses a process opened with `open_inbox`. Just as
unreliable: whoever sends one waits a bounded time for what it asked.
"""

import asyncio
import contextlib
import logging
import random
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from enum import Enum
from typing import Any, Final, NamedTuple

import redis.asyncio
import redis.exceptions
from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from pheby import metrics
from pheby.cancelling import cancel_and_wait, raise_if_cancelled, shielded

__all__ = [
    "LIVE_BYTES",
    "QUEUE_SIZE",
    "RESYNC",
    "Bell",
    "BellUnavailable",
    "Letter",
    "Live",
    "LocalBell",
    "RedisBell",
    "Resync",
    "Ring",
]

log = logging.getLogger(__name__)

QUEUE_SIZE = 10_000  # rings waiting for the consumer; past it they are dropped and RESYNC is owed
LIVE_BYTES = 8 * 1024 * 1024  # live messages' bytes waiting for the consumer; past it new ones are dropped


class Ring(NamedTuple):
    """Account `account_id`'s log reached `seq`; `published_at` (epoch seconds) when it was rung."""

    account_id: str
    seq: int
    published_at: float | None = None


class Live(NamedTuple):
    """Something published only (not logged) for the account, after its log reached `after`: `data`, as
    its publisher encoded it."""

    account_id: str
    after: int
    data: bytes


class Letter(NamedTuple):
    """A message for the process that opened the inbox `address`: `data`, as its sender encoded it."""

    address: str
    data: bytes


class Resync(Enum):
    """Rings may have been lost: re-read every position."""

    RESYNC = "resync"


RESYNC: Final = Resync.RESYNC


class BellUnavailable(Exception):
    """The ring was not published (the bell is down): the log still holds the event."""


class Bell(ABC):
    """Rings for the accounts subscribed to, to one consumer (`receive`), in a bounded queue."""

    def __init__(self, *, queue_size: int = QUEUE_SIZE, live_bytes: int = LIVE_BYTES) -> None:
        self.subscribed: set[str] = set()
        self.inboxes: set[str] = set()
        self._rings: deque[Ring | Live | Letter] = deque()
        self._queue_size = queue_size
        self._live_bytes = live_bytes
        self._live_queued = 0  # bytes of the live messages in `_rings`
        self._resync_owed = False
        self._ready = asyncio.Event()

    @property
    @abstractmethod
    def connected(self) -> bool:
        """Whether rings are arriving now; while not, the consumer polls the log."""

    async def start(self) -> None:  # noqa: B027 - nothing to start for most bells
        """Begin (a bell that connects somewhere connects now, in the background)."""

    async def publish(self, account_id: str, seq: int) -> None:
        """Ring every process subscribed to the account. Raises on failure (`ring` in `pheby.events.log`
        logs it): a lost ring delays a delivery, it loses nothing."""
        await self.publish_many([Ring(account_id, seq)])

    @abstractmethod
    async def publish_many(self, items: Sequence[Ring | Live | Letter]) -> None:
        """Send rings and live messages to every process subscribed to their accounts (itself included), and
        letters to their inboxes, in order, in one go. Raises on failure: a lost ring delays a delivery, a
        lost live message is made up for by the next, a lost letter's sender stops waiting."""

    async def subscribe(self, account_id: str) -> None:
        """Receive the account's rings from now on (once this returns, if the bell is connected)."""
        self.subscribed.add(account_id)

    async def unsubscribe(self, account_id: str) -> None:
        """Receive no more of the account's rings."""
        self.subscribed.discard(account_id)

    async def open_inbox(self, address: str) -> None:
        """Receive the letters for `address` from now on (once this returns, if the bell is connected)."""
        self.inboxes.add(address)

    async def receive(self) -> Ring | Live | Letter | Resync:
        """The next ring, live message or letter, or `RESYNC` when rings may have been lost. One consumer
        only."""
        while True:
            if self._resync_owed:
                self._resync_owed = False
                return RESYNC
            if self._rings:
                item = self._rings.popleft()
                if not isinstance(item, Ring):
                    self._live_queued -= len(item.data)
                return item
            self._ready.clear()
            await self._ready.wait()

    async def aclose(self) -> None:  # noqa: B027 - nothing to release for most bells
        """Stop; release what the bell holds."""

    def _ring(self, ring: Ring) -> None:
        if ring.account_id not in self.subscribed:
            return  # not ours (any more): the consumer would ignore it as well
        if len(self._rings) >= self._queue_size:
            self._resync(dropped=True)
            return
        self._rings.append(ring)
        self._ready.set()

    def _live(self, live: Live | Letter) -> None:
        if (live.account_id not in self.subscribed) if isinstance(live, Live) else (live.address not in self.inboxes):
            return
        if len(self._rings) >= self._queue_size or self._live_queued + len(live.data) > self._live_bytes:
            metrics.LIVE_DROPPED.inc()  # made up for by the next one; no RESYNC: the log lost nothing
            return
        self._rings.append(live)
        self._live_queued += len(live.data)
        self._ready.set()

    def _resync(self, *, dropped: bool = False) -> None:
        """Rings may have been lost: those queued are superseded by one RESYNC (live messages go too)."""
        if dropped:
            log.warning("event bell queue full: %d rings dropped, resync", len(self._rings) + 1)
        letters = [item for item in self._rings if isinstance(item, Letter)]  # not the log's: kept
        self._rings = deque(letters)
        self._live_queued = sum(len(letter.data) for letter in letters)
        self._resync_owed = True
        self._ready.set()


class LocalBell(Bell):
    """Rings within this process only: one server with no Redis (or tests)."""

    @property
    def connected(self) -> bool:
        return True

    async def publish_many(self, items: Sequence[Ring | Live | Letter]) -> None:
        for item in items:
            if isinstance(item, Ring):
                self._ring(item._replace(published_at=time.time()))
            else:
                self._live(item)


class RedisBell(Bell):
    """Rings through Redis pub/sub: channel `{prefix}events:{account_id}`, message `"{seq} {published_at}"`;
    live messages on `{prefix}live:{account_id}`, message `b"{after} " + data`.

    Publishing uses a pool of its own; subscribing, one connection read by one task, which PINGs it when
    quiet and counts a PING unanswered within `ping_seconds` as a dead connection."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "pheby:",
        connect_seconds: float = 2.0,
        ping_seconds: float = 5.0,
        backoff_seconds: tuple[float, float] = (0.05, 2.0),
        queue_size: int = QUEUE_SIZE,
        live_bytes: int = LIVE_BYTES,
    ) -> None:
        super().__init__(queue_size=queue_size, live_bytes=live_bytes)
        self._prefix = f"{prefix}events:"
        self._live_prefix = f"{prefix}live:"
        self._inbox_prefix = f"{prefix}inbox:"
        self._ping_seconds = ping_seconds
        self._backoff = backoff_seconds
        self._pool: ConnectionPool = ConnectionPool.from_url(
            url,
            socket_connect_timeout=connect_seconds,
            socket_timeout=connect_seconds,
            retry=Retry(NoBackoff(), 0),  # errors come to this class, which reconnects as it knows how
        )
        self._publisher = redis.asyncio.Redis(connection_pool=self._pool)
        self._conn: AbstractConnection | None = None  # the subscriber connection, while it is up
        self._connected = False
        self._write = asyncio.Lock()
        self._confirmations: dict[bytes, asyncio.Future[None]] = {}
        self._task: asyncio.Task[None] | None = None
        self.reconnects = 0  # connections made after the first

    @property
    def connected(self) -> bool:
        return self._connected

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._keep_connected(), name="event-bell")

    async def publish_many(self, items: Sequence[Ring | Live | Letter]) -> None:
        if self._task is not None and not self._connected:
            raise BellUnavailable()  # known down: don't wait for a connect timeout on every publish
        try:
            async with self._publisher.pipeline(transaction=False) as pipe:  # one round trip for them all
                for item in items:
                    if isinstance(item, Ring):
                        pipe.publish(self._channel(item.account_id), f"{item.seq} {time.time():.6f}")
                    elif isinstance(item, Live):
                        pipe.publish(self._live_channel(item.account_id), b"%d %b" % (item.after, item.data))
                    else:
                        pipe.publish(f"{self._inbox_prefix}{item.address}", item.data)
                await pipe.execute()
        except redis.exceptions.RedisError as e:
            raise BellUnavailable() from e

    async def subscribe(self, account_id: str) -> None:
        await super().subscribe(account_id)
        await self._subscribe_confirmed([self._channel(account_id).encode(), self._live_channel(account_id).encode()])

    async def open_inbox(self, address: str) -> None:
        await super().open_inbox(address)
        await self._subscribe_confirmed([f"{self._inbox_prefix}{address}".encode()])

    async def _subscribe_confirmed(self, channels: list[bytes]) -> None:
        confirmations = []
        for channel in channels:
            confirmed = self._confirmations.get(channel)
            if confirmed is None:
                confirmed = self._confirmations[channel] = asyncio.get_running_loop().create_future()
            confirmations.append(confirmed)
        if await self._send("SUBSCRIBE", *channels):
            # Once Redis confirms, every later publish reaches us. Not confirmed in time: the connection is
            # failing, and the reconnect subscribes it again and then says RESYNC.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._ping_seconds):  # not wait_for: it can lose a cancel (3.11)
                    await asyncio.shield(asyncio.gather(*confirmations))

    async def unsubscribe(self, account_id: str) -> None:
        await super().unsubscribe(account_id)
        await self._send("UNSUBSCRIBE", self._channel(account_id), self._live_channel(account_id))

    async def aclose(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        await self._publisher.aclose()
        await self._pool.disconnect()

    def _channel(self, account_id: str) -> str:
        return f"{self._prefix}{account_id}"

    def _live_channel(self, account_id: str) -> str:
        return f"{self._live_prefix}{account_id}"

    async def _send(self, *args: str | bytes) -> bool:
        """Send a command on the subscriber connection if it is up; whether it was sent."""
        async with self._write:
            conn = self._conn
            # Checked with no await before the send: a connection the reader gave up on is never reopened here.
            if conn is None or not conn.is_connected:
                return False
            try:
                await conn.send_command(*args, check_health=False)
            except (redis.exceptions.RedisError, OSError):
                return False  # the reader sees the same failure and reconnects
            return True

    async def _keep_connected(self) -> None:
        delay = self._backoff[0]
        connects = 0
        while True:
            conn: AbstractConnection = self._pool.make_connection()  # type: ignore[no-untyped-call]
            try:
                await conn.connect()  # type: ignore[no-untyped-call]
                self.reconnects, connects = connects, connects + 1
                delay = self._backoff[0]
                await self._listen(conn)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - whatever broke the connection, make a new one
                if self._connected:
                    log.warning("event bell lost Redis (%s); reconnecting", type(e).__name__)
                else:
                    log.debug("event bell: no Redis (%s); retrying in %.2f s", type(e).__name__, delay)
            finally:
                self._conn = None
                if self._connected:
                    self._resync()  # wakes the consumer, which polls from now on
                self._connected = False
                metrics.BELL_CONNECTED.set(0)
                for confirmed in self._confirmations.values():
                    if not confirmed.done():
                        confirmed.set_result(None)  # nobody waits for a dead connection
                self._confirmations.clear()
                with contextlib.suppress(Exception):
                    await shielded(conn.disconnect(nowait=True))
            raise_if_cancelled()  # redis-py may swallow a cancel that comes during its own awaits
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, self._backoff[1])

    async def _listen(self, conn: AbstractConnection) -> None:
        """Subscribe every account, then read rings until the connection fails."""
        self._conn = conn
        channels = [
            channel
            for account_id in sorted(self.subscribed)
            for channel in (self._channel(account_id), self._live_channel(account_id))
        ] + [f"{self._inbox_prefix}{address}" for address in sorted(self.inboxes)]
        if channels:
            await conn.send_command("SUBSCRIBE", *channels, check_health=False)
        # Its answer comes after every subscription's: from then on no ring is missed, so RESYNC then.
        await conn.send_command("PING", "subscribed", check_health=False)
        pinged: float | None = time.monotonic()
        while True:
            reply = await conn.read_response(timeout=self._ping_seconds, push_request=True)
            raise_if_cancelled()
            if reply is None:
                if pinged is not None and time.monotonic() - pinged > self._ping_seconds:
                    raise ConnectionError("Redis did not answer PING")
                if pinged is None and await self._send("PING", "alive"):
                    pinged = time.monotonic()
                continue
            kind, channel, data = _parts(reply)
            if kind == b"message" and channel is not None:
                self._on_message(channel, data)
            elif kind == b"pong":
                pinged = None
                if data == b"subscribed" and not self._connected:
                    self._connected = True
                    metrics.BELL_CONNECTED.set(1)
                    self._resync()
            elif kind == b"subscribe" and channel is not None:
                confirmed = self._confirmations.pop(channel, None)
                if confirmed is not None and not confirmed.done():
                    confirmed.set_result(None)

    def _on_message(self, channel: bytes, data: Any) -> None:
        name = channel.decode(errors="replace")
        if not isinstance(data, bytes):
            return
        if name.startswith(self._inbox_prefix):
            self._live(Letter(name.removeprefix(self._inbox_prefix), data))
            return
        if name.startswith(self._live_prefix):
            after, _, body = data.partition(b" ")
            if after.isdigit():
                self._live(Live(name.removeprefix(self._live_prefix), int(after), body))
            return
        if not name.startswith(self._prefix):
            return
        seq_text, _, published = data.decode(errors="replace").partition(" ")
        try:
            ring = Ring(name.removeprefix(self._prefix), int(seq_text), float(published) if published else None)
        except ValueError:
            log.warning("event bell: a message that is not a ring ignored")
            return
        self._ring(ring)


def _parts(reply: Any) -> tuple[bytes, bytes | None, Any]:
    """(kind, channel, data) of a reply on a subscriber connection; a PING's answer is (b"pong", None, data)."""
    if isinstance(reply, list) and reply:
        kind = reply[0] if isinstance(reply[0], bytes) else str(reply[0]).encode()
        if kind.lower() == b"pong":
            return b"pong", None, reply[1] if len(reply) > 1 else b""
        channel = reply[1] if len(reply) > 1 and isinstance(reply[1], bytes) else None
        return kind, channel, reply[2] if len(reply) > 2 else None
    if isinstance(reply, bytes):  # PING outside subscribed mode: its argument as a bulk string
        return b"pong", None, reply
    return b"", None, reply

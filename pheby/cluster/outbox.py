"""What waits to be published on the bell: the newest `message.delta` of each message, and the newest
ring of each account.

Deltas are cumulative, so only the newest of a message is worth publishing; a ring says the log reached
a seq, so only the newest of an account is. One task publishes what waits, all of it in one round trip
(a pipeline), in the order it started waiting; what arrives while an older one of its message (or
account) still waits takes its place. So an idle bus gets every delta at once, and a busy one (or a
slow Redis) gets fewer, larger ones, several to a round trip: batching only when it is behind. No
broadcast waits for a publish: a Redis that hangs costs the other processes their rings (they poll the
log) and their text, never this process's clients a moment. A ring waits behind the deltas broadcast
before its event, so the text reaches the other processes before the event that follows it. Bounded
in bytes; a delta past the bound is dropped (the next one, or the logged event that ends the text,
makes up for it).
"""

import asyncio
import logging
from typing import Final

from pheby import metrics
from pheby.cancelling import cancel_and_wait, raise_if_cancelled
from pheby.cluster.wire import encode_live
from pheby.events import Bell, Live, Ring
from pheby.protocol.frames import MessageDelta

__all__ = ["OUTBOX_BYTES", "BellOutbox"]

log = logging.getLogger(__name__)

OUTBOX_BYTES: Final = 32 * 1024 * 1024
PUBLISH_SECONDS: Final = 1.0  # a publish slower than this is given up (the next delta makes up for it)


class BellOutbox:
    def __init__(self, bell: Bell, origin: str, *, max_bytes: int = OUTBOX_BYTES) -> None:
        self._bell = bell
        self._origin = origin
        self._max_bytes = max_bytes
        # By message id (a delta) or ("ring", account), in the order they started waiting.
        self._waiting: dict[str | tuple[str, str], Live | Ring] = {}
        self._bytes = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="bell-outbox")

    async def aclose(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    def put_ring(self, account_id: str, seq: int) -> None:
        """Wait to ring that the account's log reached `seq` (in place of an older ring still waiting)."""
        key = ("ring", account_id)
        waiting = self._waiting.get(key)
        if not isinstance(waiting, Ring) or waiting.seq < seq:
            self._waiting[key] = Ring(account_id, seq)
            self._wake.set()

    def put_delta(self, account_id: str, after: int, delta: MessageDelta) -> None:
        """Wait to publish `delta` (following seq `after` of the account's log), in place of its message's
        previous one if that is still waiting."""
        data = encode_live(self._origin, delta)
        previous = self._waiting.get(delta.message_id)
        freed = len(previous.data) if isinstance(previous, Live) else 0
        if self._bytes - freed + len(data) > self._max_bytes:
            metrics.LIVE_DROPPED.inc()
            return
        self._bytes += len(data) - freed
        self._waiting[delta.message_id] = Live(account_id, after, data)
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._waiting:  # one publish at a time: a message's deltas stay in order
                await self._publish_waiting()
                raise_if_cancelled()  # redis-py's pipeline may swallow a cancel that comes during it

    async def _publish_waiting(self) -> None:
        """Everything waiting, in one go."""
        items = list(self._waiting.values())
        self._waiting.clear()
        self._bytes = 0
        try:
            # Not `wait_for`: on Python 3.11 it loses a cancel that comes as the publish ends, and the
            # task, cancelled at shutdown, would wait for its next delta forever.
            async with asyncio.timeout(PUBLISH_SECONDS):
                await self._bell.publish_many(items)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the bell is down or slow: the feeds poll, the next delta makes up
            metrics.LIVE_PUBLISH_FAILURES.inc(sum(isinstance(item, Live) for item in items))
            metrics.EVENT_PUBLISH_FAILURES.inc(sum(isinstance(item, Ring) for item in items))

"""The live text waiting to reach the other processes: the newest `message.delta` of each message.

Deltas are cumulative, so only the newest of a message is worth publishing. One task publishes what
waits, all of it in one round trip (a pipeline), in the order the messages started waiting; a delta
that arrives while its message's previous one is still waiting takes its place. So an idle bus gets
every delta at once, and a busy one (or a slow Redis) gets fewer, larger ones, several to a round trip:
batching only when it is behind. Bounded in bytes; a
delta past the bound is dropped (the next one, or the logged event that ends the text, makes up for it).
"""

import asyncio
import logging
from typing import Final

from pheby import metrics
from pheby.cancelling import cancel_and_wait
from pheby.cluster.wire import encode_live
from pheby.events import Bell, Live
from pheby.protocol.frames import MessageDelta

__all__ = ["OUTBOX_BYTES", "LiveOutbox"]

log = logging.getLogger(__name__)

OUTBOX_BYTES: Final = 32 * 1024 * 1024
PUBLISH_SECONDS: Final = 1.0  # a publish slower than this is given up (the next delta makes up for it)


class LiveOutbox:
    def __init__(self, bell: Bell, origin: str, *, max_bytes: int = OUTBOX_BYTES) -> None:
        self._bell = bell
        self._origin = origin
        self._max_bytes = max_bytes
        self._waiting: dict[str, Live] = {}  # by message id, in the order they started waiting
        self._bytes = 0
        self._publishing = asyncio.Lock()  # one publish at a time: a message's deltas stay in order
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.published = 0
        self.dropped = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="live-outbox")

    async def aclose(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    def put(self, account_id: str, after: int, delta: MessageDelta) -> None:
        """Wait to publish `delta` (following seq `after` of the account's log), in place of its message's
        previous one if that is still waiting."""
        data = encode_live(self._origin, delta)
        previous = self._waiting.get(delta.message_id)
        freed = len(previous.data) if previous is not None else 0
        if self._bytes - freed + len(data) > self._max_bytes:
            self.dropped += 1
            metrics.LIVE_DROPPED.inc()
            return
        self._bytes += len(data) - freed
        self._waiting[delta.message_id] = Live(account_id, after, data)
        self._wake.set()

    async def flush(self, account_id: str) -> None:
        """Publish the account's waiting deltas now (before an event that must follow them)."""
        async with self._publishing:
            await self._publish([m for m, w in self._waiting.items() if w.account_id == account_id])

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._waiting:
                async with self._publishing:
                    await self._publish(list(self._waiting))

    async def _publish(self, message_ids: list[str]) -> None:
        lives = [live for m in message_ids if (live := self._waiting.pop(m, None)) is not None]
        if not lives:
            return
        self._bytes -= sum(len(live.data) for live in lives)
        try:
            # Not `wait_for`: on Python 3.11 it loses a cancel that comes as the publish ends, and the
            # task, cancelled at shutdown, would wait for its next delta forever.
            async with asyncio.timeout(PUBLISH_SECONDS):
                await self._bell.publish_live(lives)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the bell is down or slow: the next delta makes up for these
            metrics.LIVE_PUBLISH_FAILURES.inc(len(lives))
        else:
            self.published += len(lives)

"""Pushes leave off the run's path: a bounded queue, a few senders, retries with backoff.

`submit` only queues (it runs inside a broadcast, so it never waits). The queue holds at most
`per_account` notices of one account and `total` in all; past either, the oldest notice is dropped
and counted. At most `concurrency` notices are being sent at once, each to every subscription of its
account that asked for its event. A send answered 404 / 410 removes the subscription; 429, 5xx, a
timeout or a broken connection is tried again after a backoff (or the push service's `Retry-After`,
up to a bound), `tries` times in all. A push service that hangs or refuses costs a sender slot for
at most its timeouts, never a delta, and never more memory than the bounds. A notice for an account that
another process has in front of its person as it goes out is not sent (`foreground_elsewhere`).
"""

import asyncio
import logging
from collections import Counter, deque
from collections.abc import Awaitable, Callable

from pheby import metrics
from pheby.push.notices import Notice
from pheby.push.sender import Outcome, PushSender, Result
from pheby.push.subscriptions import PushSubscriptions, StoredSubscription, endpoint_origin

log = logging.getLogger("pheby.push")

PER_ACCOUNT = 64
TOTAL = 1024
CONCURRENCY = 8
TRIES = 3
BACKOFF_SECONDS = 0.5  # doubled after each try
RETRY_AFTER_MAX = 30.0


class PushDelivery:
    def __init__(
        self,
        subscriptions: PushSubscriptions,
        sender: PushSender,
        *,
        per_account: int = PER_ACCOUNT,
        total: int = TOTAL,
        concurrency: int = CONCURRENCY,
        tries: int = TRIES,
        backoff: float = BACKOFF_SECONDS,
        foreground_elsewhere: Callable[[str], Awaitable[bool]] | None = None,
    ) -> None:
        self._subscriptions = subscriptions
        # Whether another process has the account in front of its person as a notice goes out: then it doesn't.
        self._foreground_elsewhere = foreground_elsewhere
        self._sender = sender
        self._per_account = per_account
        self._total = total
        self._tries = tries
        self._backoff = backoff
        self._queue: deque[Notice] = deque()
        self._queued: Counter[str] = Counter()  # account → its notices in the queue
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(concurrency)
        self._sending: set[asyncio.Task[None]] = set()
        # Per send: delivered, gone, retried, failed, refused, dropped; per notice: foreground (not sent).
        self.outcomes: Counter[str] = Counter()

    def submit(self, notice: Notice) -> None:
        if self._queued[notice.account_id] >= self._per_account:
            self._drop(next(n for n in self._queue if n.account_id == notice.account_id))
        elif len(self._queue) >= self._total:
            self._drop(self._queue[0])
        self._queue.append(notice)
        self._queued[notice.account_id] += 1
        self._wake.set()

    def queued(self) -> int:
        return len(self._queue)

    async def run(self) -> None:
        """Send what is queued until cancelled; what is being sent then is cancelled too."""
        try:
            while True:
                while not self._queue:
                    self._wake.clear()
                    await self._wake.wait()
                await self._slots.acquire()
                if not self._queue:  # dropped meanwhile
                    self._slots.release()
                    continue
                notice = self._take()
                task = asyncio.create_task(self._deliver(notice), name="push-send")
                self._sending.add(task)
                task.add_done_callback(self._sent)
        finally:
            for task in list(self._sending):
                task.cancel()
            await asyncio.gather(*self._sending, return_exceptions=True)

    def _count(self, outcome: str) -> None:
        self.outcomes[outcome] += 1
        metrics.PUSH_SENDS.labels(outcome).inc()

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sending.discard(task)
        self._slots.release()

    def _take(self) -> Notice:
        notice = self._queue.popleft()
        self._queued[notice.account_id] -= 1
        if not self._queued[notice.account_id]:
            del self._queued[notice.account_id]
        return notice

    def _drop(self, notice: Notice) -> None:
        self._queue.remove(notice)
        self._queued[notice.account_id] -= 1
        if not self._queued[notice.account_id]:
            del self._queued[notice.account_id]
        self._count("dropped")
        dropped = self.outcomes["dropped"]
        if dropped & (dropped - 1) == 0:  # the 1st, 2nd, 4th, 8th ...: a flood does not flood the log
            log.warning("push queue full: %d pushes dropped so far, the oldest first", dropped)

    async def _deliver(self, notice: Notice) -> None:
        try:
            if self._foreground_elsewhere is not None and await self._foreground_elsewhere(notice.account_id):
                self._count("foreground")
                return
            subscriptions = await self._subscriptions.wanting(notice.account_id, notice.event)
            await asyncio.gather(*(self._send(notice, s) for s in subscriptions))
        except Exception as exc:  # noqa: BLE001 - a push never takes the server down, nor fills its log
            log.warning("push not delivered (%s)", type(exc).__name__)

    async def _send(self, notice: Notice, subscription: StoredSubscription) -> None:
        outcome = Outcome(Result.RETRY)
        for attempt in range(self._tries):
            if attempt:
                self._count("retried")
                delay = self._backoff * 2 ** (attempt - 1)
                await asyncio.sleep(min(RETRY_AFTER_MAX, max(delay, outcome.retry_after or 0.0)))
            outcome = await self._sender.send(notice, subscription)
            if outcome.result is not Result.RETRY:
                break
        self._count(outcome.result.value)
        if outcome.result is Result.GONE:
            await self._subscriptions.forget(subscription.id)
            log.info("push subscription %s removed: the push service no longer knows it", subscription.id)
        elif outcome.result is not Result.DELIVERED:
            log.info("push to %s not delivered: %s", endpoint_origin(subscription.endpoint), outcome.result.value)

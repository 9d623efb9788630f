"""Guards of the unauthenticated surfaces: failed-attempt lockouts, password hashing, sockets before hello.

Lockouts (login and WebSocket hello) are kept in SQLite so restarts don't reset them. A login is
limited per source address (5 failures a minute) and per username (10 in ten minutes, whichever
addresses they come from), and its password hash runs in a limiter of its own (`PasswordHashing`).
"""

import asyncio
import hashlib
import math
import time
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from pheby import metrics
from pheby.db import Connection, Database
from pheby.errors import RateLimited

T = TypeVar("T")


class FailureLimiter:
    """At most `limit` failures per `window` seconds per subject; then the subject is locked out."""

    def __init__(
        self, db: Database, scope: str, *, limit: int = 5, window: float = 60.0, clock: Callable[[], float] = time.time
    ) -> None:
        self._db = db
        self.scope = scope
        self.limit = limit
        self.window = window
        self._clock = clock
        self._turns: dict[str, asyncio.Lock] = {}
        self._waiting: Counter[str] = Counter()

    @asynccontextmanager
    async def one_at_a_time(self, subject: str) -> AsyncIterator[None]:
        """Serialize a subject's attempts, so each one sees every failure recorded before it.

        Without this, attempts evaluated concurrently would all pass `is_locked` before any of
        them recorded its failure: N sockets would get N guesses however low the limit.
        """
        lock = self._turns.setdefault(subject, asyncio.Lock())
        self._waiting[subject] += 1
        try:
            async with lock:
                yield
        finally:
            self._waiting[subject] -= 1
            if not self._waiting[subject]:
                del self._waiting[subject], self._turns[subject]

    async def is_locked(self, subject: str) -> bool:
        """True once the subject has `limit` failures inside the window."""
        since = self._clock() - self.window

        def q(conn: Connection) -> int:
            row = conn.execute(
                "SELECT COUNT(*) FROM auth_failures WHERE scope = ? AND subject = ? AND at > ?",
                (self.scope, subject, since),
            ).fetchone()
            return int(row[0])

        return await self._db.run(q) >= self.limit

    async def retry_after(self, subject: str) -> int | None:
        """Whole seconds until the subject is no longer locked out; None when it isn't."""
        now = self._clock()

        def q(conn: Connection) -> float | None:
            # The limit-th newest failure in the window: once it leaves the window, the lock is off.
            row = conn.execute(
                "SELECT at FROM auth_failures WHERE scope = ? AND subject = ? AND at > ? "
                "ORDER BY at DESC LIMIT 1 OFFSET ?",
                (self.scope, subject, now - self.window, self.limit - 1),
            ).fetchone()
            return None if row is None else float(row[0])

        at = await self._db.run(q)
        return None if at is None else max(1, math.ceil(at + self.window - now))

    async def record_failure(self, subject: str) -> None:
        now = self._clock()

        def q(conn: Connection) -> None:
            # Old rows are pruned on write so the table stays the size of one window.
            conn.execute("DELETE FROM auth_failures WHERE scope = ? AND at <= ?", (self.scope, now - self.window))
            conn.execute("INSERT INTO auth_failures (scope, subject, at) VALUES (?, ?, ?)", (self.scope, subject, now))

        await self._db.transaction(q)


class PasswordHashing:
    """Password checks (scrypt at `SCRYPT_COST`: 128 MiB and about half a second of a core each) run
    `slots` at a time.

    They run on worker threads counted by a limiter of their own, so a flood of logins can neither
    take the threads that blob, memory and PDF work share (anyio's default limiter) nor hold more
    than `slots` hashes' memory: with the login guard's 2 slots, 256 MiB and two cores at most. A
    caller's hashes (a check, then a rehash or the new password's hash) run one after the other in
    its one slot. A caller waits at most `wait` seconds for a slot, then gets `RateLimited`.
    """

    def __init__(self, slots: int = 2, wait: float = 3.0) -> None:
        self.wait = wait
        self._admission = anyio.CapacityLimiter(slots)
        self._threads = anyio.CapacityLimiter(slots)

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        with anyio.move_on_after(self.wait) as waiting:
            await self._admission.acquire()
        if waiting.cancelled_caught:
            raise RateLimited("Too many logins at once; try again in a few seconds", retry_after=1)
        try:
            return await anyio.to_thread.run_sync(fn, *args, limiter=self._threads)
        finally:
            self._admission.release()


@asynccontextmanager
async def taking_turns(
    limits: tuple[tuple[FailureLimiter, str], ...], *, wait: float, busy: str, locked: str
) -> AsyncIterator[None]:
    """One attempt, after the earlier ones of each (limiter, subject), refused (`RateLimited`) while any of
    them is locked out. Each sees every failure recorded before it (else concurrent guesses would all pass
    the check), and the wait for the turn is bounded: a caller queued behind a flood gets `busy`."""
    async with AsyncExitStack() as turns:
        with anyio.move_on_after(wait) as waiting:
            for limiter, who in limits:
                await turns.enter_async_context(limiter.one_at_a_time(who))
        if waiting.cancelled_caught:
            raise RateLimited(busy, retry_after=1)
        for limiter, who in limits:
            retry_after = await limiter.retry_after(who)
            if retry_after is not None:
                metrics.LOCKOUTS.labels(limiter.scope).inc()
                raise RateLimited(locked, retry_after=retry_after)
        yield


class AttemptLimits:
    """Attempts limited per source address and per what they try (a username, an account).

    Attempts of one address, and of one subject, run one at a time so each sees every failure
    recorded before it (else concurrent guesses would all pass the check). The wait for that turn is
    bounded too: a caller queued behind a flood gets `RateLimited`, not a long wait. Locks are always
    taken address first, so two attempts never wait for each other.
    """

    busy = "Too many attempts at once; try again in a few seconds"
    locked = "Too many failed attempts; try again later"

    def __init__(self, by_address: FailureLimiter, by_subject: FailureLimiter, *, wait: float = 3.0) -> None:
        self.by_address = by_address
        self.by_subject = by_subject
        self.wait = wait

    @asynccontextmanager
    async def attempt(self, address: str, subject: str) -> AsyncIterator[None]:
        """One attempt: after those of its address and of its subject, refused while either is locked."""
        async with self._turn(((self.by_address, address), (self.by_subject, subject))):
            yield

    @asynccontextmanager
    async def address_attempt(self, address: str) -> AsyncIterator[None]:
        """One attempt counted by its address alone (no subject to count by: the owner secret's)."""
        async with self._turn(((self.by_address, address),)):
            yield

    def _turn(self, limits: tuple[tuple[FailureLimiter, str], ...]) -> AbstractAsyncContextManager[None]:
        return taking_turns(limits, wait=self.wait, busy=self.busy, locked=self.locked)

    async def record_failure(self, address: str, subject: str) -> None:
        await self.by_address.record_failure(address)
        await self.by_subject.record_failure(subject)


class LoginGuard(AttemptLimits):
    """The limits of `POST /api/auth/login`: 5 failures a minute per address, 10 in ten minutes per username
    (whichever addresses they come from), and the hashing limiter."""

    busy = "Too many logins at once; try again in a few seconds"
    locked = "Too many failed logins; try again later"

    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time, wait: float = 3.0) -> None:
        super().__init__(
            FailureLimiter(db, "login", limit=5, window=60.0, clock=clock),
            FailureLimiter(db, "login-username", limit=10, window=600.0, clock=clock),
            wait=wait,
        )
        self.hashing = PasswordHashing(slots=2, wait=wait)

    async def record_failure(self, address: str, subject: str) -> None:
        metrics.LOGIN_FAILURES.inc()
        await super().record_failure(address, subject)


class AddressSlots:
    """At most `limit` holders at a time per source address (the sockets that have not said hello)."""

    def __init__(self, limit: int = 8) -> None:
        self.limit = limit
        self._held: Counter[str] = Counter()

    def try_take(self, address: str) -> bool:
        if self._held[address] >= self.limit:
            return False
        self._held[address] += 1
        return True

    def give_back(self, address: str) -> None:
        self._held[address] -= 1
        if self._held[address] <= 0:
            del self._held[address]


class RecentCounts:
    """How often each source did something in the last `window` seconds; past `limit`, how long it must wait.

    In memory: checking costs a request no query. At most `max_sources` sources are tracked; past that
    the least recently seen is forgotten.
    """

    def __init__(
        self, *, limit: int, window: float, max_sources: int = 65_536, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.window = window
        self._max_sources = max_sources
        self._clock = clock
        self._times: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after(self, source: str) -> int | None:
        """Whole seconds until the source is under its limit again; None when it is now."""
        times = self._recent(source)
        if times is None or len(times) < self.limit:
            return None
        return max(1, math.ceil(times[-self.limit] + self.window - self._clock()))

    def record(self, source: str) -> None:
        times = self._recent(source)
        if times is None:
            times = self._times[source] = deque(maxlen=self.limit)
            _bound(self._times, self._max_sources)
        times.append(self._clock())
        self._times.move_to_end(source)

    def __len__(self) -> int:
        return len(self._times)

    def _recent(self, source: str) -> "deque[float] | None":
        times = self._times.get(source)
        if times is None:
            return None
        since = self._clock() - self.window
        while times and times[0] <= since:
            times.popleft()
        if not times:
            del self._times[source]
            return None
        return times


class BearerFailures:
    """Wrong bearer credentials on `/api/*` and `/attachments`, counted per source address.

    After `limit` failures inside `window` seconds the address is locked out: a credential presented
    from it is refused (429 with Retry-After) before it is looked at, unless it is one that already
    authenticated from that address (`vouch`). So a weak `PHEBY_SECRET` can't be guessed over REST (a
    guess that hits is refused like the others), while the clients already working from that address,
    behind the same NAT as the guesser, go on as before.

    Everything is in memory (`RecentCounts`): checking costs a request no query, and a failure is
    recorded before the caller awaits anything, so concurrent guesses each see the ones before them.
    At most `max_sources` addresses are tracked in each table.
    """

    VOUCHED_PER_SOURCE = 8

    def __init__(
        self,
        *,
        limit: int = 10,
        window: float = 60.0,
        max_sources: int = 65_536,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._failures = RecentCounts(limit=limit, window=window, max_sources=max_sources, clock=clock)
        self._max_sources = max_sources
        self._vouched: OrderedDict[str, OrderedDict[bytes, None]] = OrderedDict()

    def retry_after(self, address: str, credential: str) -> int | None:
        """Whole seconds until the address may try `credential`; None when it may now."""
        retry_after = self._failures.retry_after(address)
        known = self._vouched.get(address)
        if retry_after is None or (known is not None and _digest(credential) in known):
            return None
        return retry_after

    def record_failure(self, address: str) -> None:
        metrics.BEARER_FAILURES.inc()
        self._failures.record(address)

    def vouch(self, address: str, credential: str) -> None:
        """`credential` authenticated from `address`: a lockout of the address won't refuse it."""
        known = self._vouched.get(address)
        if known is None:
            known = self._vouched[address] = OrderedDict()
            _bound(self._vouched, self._max_sources)
        self._vouched.move_to_end(address)
        known[_digest(credential)] = None
        known.move_to_end(_digest(credential))
        _bound(known, self.VOUCHED_PER_SOURCE)


def _digest(credential: str) -> bytes:
    return hashlib.sha256(credential.encode()).digest()


def _bound(table: "OrderedDict[Any, Any]", size: int) -> None:
    while len(table) > size:
        table.popitem(last=False)

"""Failed-attempt lockouts (login and WebSocket hello), kept in SQLite so restarts don't reset them."""

import asyncio
import sqlite3
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from pheby.db import Database


class FailureLimiter:
    """At most `limit` failures per `window` seconds per subject; then the subject is locked out."""

    def __init__(
        self, db: Database, scope: str, *, limit: int = 5, window: float = 60.0, clock: Callable[[], float] = time.time
    ) -> None:
        self._db = db
        self._scope = scope
        self.limit = limit
        self.window = window
        self._clock = clock
        self._lock = asyncio.Lock()
        self._in_flight: Counter[str] = Counter()

    async def _failures(self, subject: str) -> int:
        since = self._clock() - self.window

        def q(conn: sqlite3.Connection) -> int:
            row = conn.execute(
                "SELECT COUNT(*) FROM auth_failures WHERE scope = ? AND subject = ? AND at > ?",
                (self._scope, subject, since),
            ).fetchone()
            return int(row[0])

        return await self._db.run(q)

    async def is_locked(self, subject: str) -> bool:
        """True once the subject has `limit` failures inside the window."""
        return await self._failures(subject) >= self.limit

    @asynccontextmanager
    async def attempt(self, subject: str) -> AsyncIterator[bool]:
        """Yield whether an attempt may go ahead; attempts in flight count as failures until they end.

        Checking, then verifying (a slow scrypt), then recording would let twenty concurrent
        guesses all pass the check; here at most `limit` can be undecided or failed at once.
        A failed attempt calls `record_failure` before leaving the block.
        """
        async with self._lock:
            allowed = await self._failures(subject) + self._in_flight[subject] < self.limit
            if allowed:
                self._in_flight[subject] += 1
        try:
            yield allowed
        finally:
            if allowed:
                self._in_flight[subject] -= 1
                if self._in_flight[subject] <= 0:
                    del self._in_flight[subject]

    async def record_failure(self, subject: str) -> None:
        now = self._clock()

        def q(conn: sqlite3.Connection) -> None:
            # Old rows are pruned on write so the table stays the size of one window.
            conn.execute("DELETE FROM auth_failures WHERE scope = ? AND at <= ?", (self._scope, now - self.window))
            conn.execute("INSERT INTO auth_failures (scope, subject, at) VALUES (?, ?, ?)", (self._scope, subject, now))

        await self._db.transaction(q)

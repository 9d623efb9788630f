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

        def q(conn: sqlite3.Connection) -> int:
            row = conn.execute(
                "SELECT COUNT(*) FROM auth_failures WHERE scope = ? AND subject = ? AND at > ?",
                (self._scope, subject, since),
            ).fetchone()
            return int(row[0])

        return await self._db.run(q) >= self.limit

    async def record_failure(self, subject: str) -> None:
        now = self._clock()

        def q(conn: sqlite3.Connection) -> None:
            # Old rows are pruned on write so the table stays the size of one window.
            conn.execute("DELETE FROM auth_failures WHERE scope = ? AND at <= ?", (self._scope, now - self.window))
            conn.execute("INSERT INTO auth_failures (scope, subject, at) VALUES (?, ?, ?)", (self._scope, subject, now))

        await self._db.transaction(q)

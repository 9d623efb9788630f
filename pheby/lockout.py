"""Failed-attempt lockouts (login and WebSocket hello), kept in SQLite so restarts don't reset them."""

import sqlite3
import time
from collections.abc import Callable

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

"""Who owns a Hermes job, and since when the job poller has watched each Hermes."""

import time
from collections.abc import Callable

from pheby.db import Connection, Database


class TaskOwners:
    def __init__(self, db: Database, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock

    async def record(self, hermes_url: str, job_id: str, account_id: str) -> None:
        now = self._clock()
        await self._db.run(
            lambda c: c.execute(
                "INSERT INTO task_owners (hermes_url, job_id, account_id, created_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (hermes_url, job_id) DO UPDATE "
                "SET account_id = excluded.account_id, created_at = excluded.created_at",
                (hermes_url, job_id, account_id, now),
            )
        )

    async def owner(self, hermes_url: str, job_id: str) -> str | None:
        row = await self._db.run(
            lambda c: c.execute(
                "SELECT account_id FROM task_owners WHERE hermes_url = ? AND job_id = ?", (hermes_url, job_id)
            ).fetchone()
        )
        return None if row is None else str(row[0])

    async def owned_by(self, hermes_url: str, account_id: str) -> set[str]:
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT job_id FROM task_owners WHERE hermes_url = ? AND account_id = ?", (hermes_url, account_id)
            ).fetchall()
        )
        return {r[0] for r in rows}

    async def forget(self, hermes_url: str, job_id: str) -> None:
        await self._db.run(
            lambda c: c.execute("DELETE FROM task_owners WHERE hermes_url = ? AND job_id = ?", (hermes_url, job_id))
        )

    async def baseline(self, hermes_url: str) -> float:
        """When this Hermes was first polled (set now on the first call)."""
        now = self._clock()

        def q(conn: Connection) -> float:
            conn.execute(
                "INSERT INTO cron_baselines (hermes_url, since) VALUES (?, ?) ON CONFLICT DO NOTHING", (hermes_url, now)
            )
            return float(
                conn.execute("SELECT since FROM cron_baselines WHERE hermes_url = ?", (hermes_url,)).fetchone()[0]
            )

        return await self._db.transaction(q)

"""A person's sessions, as the Security page lists and ends them: all the SQL of that view.

A session is an `auth_tokens` row of kind `session` (issued by `pheby.signin.sessions.start_session`);
listed while live (not revoked, not expired). Ending one revokes it; the caller closes its sockets
(`Revocations.close_token`).
"""

import time
from collections.abc import Callable

import msgspec

from pheby.db import Connection, Database


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    device: str | None
    method: str | None
    created_at: float
    last_used_at: float | None
    expires_at: float | None


class Sessions:
    """Listing and ending an account's sessions; every query is bounded to that account."""

    def __init__(self, db: Database, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock

    async def of_account(self, account_id: str) -> list[SessionInfo]:
        """The account's live sessions, newest first."""
        now = self._clock()
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT id, device, method, created_at, last_used_at, expires_at FROM auth_tokens "
                "WHERE account_id = ? AND kind = 'session' AND revoked_at IS NULL "
                "AND (expires_at IS NULL OR expires_at > ?) ORDER BY created_at DESC, id",
                (account_id, now),
            ).fetchall()
        )
        return [
            SessionInfo(
                id=r["id"],
                device=r["device"],
                method=r["method"],
                created_at=r["created_at"],
                last_used_at=r["last_used_at"],
                expires_at=r["expires_at"],
            )
            for r in rows
        ]

    async def end(self, account_id: str, session_id: str) -> bool:
        """End one of the account's live sessions; False when it has no such session (another's is none)."""
        now = self._clock()
        ended: int = await self._db.run(
            lambda c: (
                c.execute(
                    "UPDATE auth_tokens SET revoked_at = ? WHERE id = ? AND account_id = ? AND kind = 'session' "
                    "AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)",
                    (now, session_id, account_id, now),
                ).rowcount
            )
        )
        return ended > 0

    async def end_all_but(self, account_id: str, keep_id: str | None) -> list[str]:
        """End every live session of the account but `keep_id` (one transaction); the ids ended."""
        now = self._clock()
        return await self._db.transaction(lambda conn: end_sessions_but(conn, account_id, keep_id, now))


def end_sessions_but(conn: Connection, account_id: str, keep_id: str | None, now: float) -> list[str]:
    """Revoke every live session of the account but `keep_id`, inside the caller's transaction (a password
    change ends them with the new hash); the ids ended."""
    rows = conn.execute(
        "UPDATE auth_tokens SET revoked_at = ? WHERE account_id = ? AND id IS DISTINCT FROM ? "
        "AND kind = 'session' "
        "AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?) RETURNING id",
        (now, account_id, keep_id, now),
    ).fetchall()
    return [r[0] for r in rows]

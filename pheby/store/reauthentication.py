"""When a session last proved who its holder is (`auth_tokens.authenticated_at`, migration 0016)."""

import time
from collections.abc import Callable

from pheby.db import Database


class SessionAuthentication:
    """Reads and renews a token's `authenticated_at`. `clock` is injectable so ages can be tested."""

    def __init__(self, db: Database, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock

    async def authenticated_at(self, token_id: str) -> float | None:
        """When the live token's holder last signed in or re-authenticated with it; None if never or not live."""
        now = self._clock()
        row = await self._db.run(
            lambda c: c.execute(
                "SELECT authenticated_at FROM auth_tokens WHERE id = ? AND revoked_at IS NULL "
                "AND (expires_at IS NULL OR expires_at > ?)",
                (token_id, now),
            ).fetchone()
        )
        return None if row is None or row[0] is None else float(row[0])

    async def authenticated_within(self, token_id: str, seconds: float) -> bool:
        """Whether the live token's holder signed in or re-authenticated with it in the last `seconds`."""
        authenticated_at = await self.authenticated_at(token_id)
        return authenticated_at is not None and self._clock() - authenticated_at <= seconds

    async def mark_authenticated(self, token_id: str) -> None:
        """The holder of this token proved who they are just now."""
        now = self._clock()
        await self._db.run(
            lambda c: c.execute(
                "UPDATE auth_tokens SET authenticated_at = ? WHERE id = ? AND revoked_at IS NULL", (now, token_id)
            )
        )

"""OpenID Connect's rows: linked identities (issuer, subject → account) and pending sign-ins.

A pending sign-in is found by a SHA-256 digest of its `state` (the state itself is only in the
browser's URL and cookie), taken at most once (deleted as it is read) and only before it expires.
"""

import hashlib
import time
from collections.abc import Callable

import msgspec

from pheby.db import Connection, Database


class PendingLogin(msgspec.Struct, frozen=True):
    nonce: str
    code_verifier: str


def _state_digest(state: str) -> str:
    return hashlib.sha256(state.encode()).hexdigest()


class OidcStore:
    """`clock` is injectable so expiry can be tested."""

    def __init__(self, db: Database, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock

    async def begin(self, state: str, nonce: str, code_verifier: str, ttl_seconds: float, *, limit: int) -> bool:
        """Record a sign-in sent to the provider, unless `limit` are under way already (False then): anyone
        may begin one, so their number is bounded. Expired ones are swept as new ones begin."""
        now = self._clock()

        def q(conn: Connection) -> bool:
            conn.execute("DELETE FROM oidc_pending_logins WHERE expires_at <= ?", (now,))
            if conn.execute("SELECT COUNT(*) FROM oidc_pending_logins").fetchone()[0] >= limit:
                return False
            conn.execute(
                "INSERT INTO oidc_pending_logins (state_sha256, nonce, code_verifier, created_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (_state_digest(state), nonce, code_verifier, now, now + ttl_seconds),
            )
            return True

        return await self._db.transaction(q)

    async def take(self, state: str) -> PendingLogin | None:
        """The sign-in `state` began, removed so it can't be used again; None if unknown, used or expired."""
        now = self._clock()
        row = await self._db.run(
            lambda c: c.execute(
                "DELETE FROM oidc_pending_logins WHERE state_sha256 = ? RETURNING nonce, code_verifier, expires_at",
                (_state_digest(state),),
            ).fetchone()
        )
        if row is None or row["expires_at"] <= now:
            return None
        return PendingLogin(nonce=row["nonce"], code_verifier=row["code_verifier"])

    async def account_id_for(self, issuer: str, subject: str) -> str | None:
        row = await self._db.run(
            lambda c: c.execute(
                "SELECT account_id FROM oidc_identities WHERE issuer = ? AND subject = ?", (issuer, subject)
            ).fetchone()
        )
        return None if row is None else str(row[0])

    async def link(self, issuer: str, subject: str, account_id: str, *, replace: bool = True) -> str:
        """Link the identity to `account_id` and return the account it is linked to now.

        `replace=False` keeps an existing link (two first sign-ins racing: the first one's account wins).
        """
        now = self._clock()
        insert = "INSERT INTO oidc_identities (issuer, subject, account_id, created_at) VALUES (?, ?, ?, ?) "
        keep_or_replace = (
            insert + "ON CONFLICT (issuer, subject) DO UPDATE SET account_id = excluded.account_id"
            if replace
            else insert + "ON CONFLICT (issuer, subject) DO NOTHING"
        )

        def q(conn: Connection) -> str:
            conn.execute(keep_or_replace, (issuer, subject, account_id, now))
            row = conn.execute(
                "SELECT account_id FROM oidc_identities WHERE issuer = ? AND subject = ?", (issuer, subject)
            ).fetchone()
            return str(row[0])

        return await self._db.transaction(q)

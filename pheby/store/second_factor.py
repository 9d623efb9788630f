"""The second factor of password sign-in: all its SQL (TOTP secrets, recovery codes, sign-in tickets)
and the limits on guessing its codes.

A secret is pending from its setup until a code confirms it, then enabled. Each accepted code's time
step is kept, and a code is accepted only for a newer step: no code works twice. Recovery codes and
tickets are stored as SHA-256 digests, each used once. `clock` is injectable so codes and tickets can be
tested at chosen times.
"""

import hashlib
import time
from collections.abc import Callable, Sequence

import msgspec

from pheby.db import Connection, Database
from pheby.store.lockout import AttemptLimits, FailureLimiter


class TotpState(msgspec.Struct, frozen=True):
    secret: str
    enabled: bool
    last_step: int | None


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class SecondFactors:
    """The accounts' TOTP secrets, recovery codes and sign-in tickets."""

    def __init__(self, db: Database, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self.clock = clock

    async def state(self, account_id: str) -> TotpState | None:
        """The account's secret, pending or enabled; None when it has none."""
        row = await self._db.run(
            lambda c: c.execute(
                "SELECT secret, enabled_at, last_step FROM totp_secrets WHERE account_id = ?", (account_id,)
            ).fetchone()
        )
        if row is None:
            return None
        return TotpState(secret=row["secret"], enabled=row["enabled_at"] is not None, last_step=row["last_step"])

    async def is_enabled(self, account_id: str) -> bool:
        state = await self.state(account_id)
        return state is not None and state.enabled

    async def set_pending(self, account_id: str, secret: str) -> bool:
        """Keep `secret` as the account's pending one (replacing an unconfirmed one); False when one is on."""
        now = self.clock()

        def q(conn: Connection) -> bool:
            cursor = conn.execute(
                "INSERT INTO totp_secrets (account_id, secret, created_at) VALUES (?, ?, ?) "
                "ON CONFLICT (account_id) DO UPDATE SET secret = excluded.secret, created_at = excluded.created_at, "
                "last_step = NULL WHERE totp_secrets.enabled_at IS NULL",
                (account_id, secret, now),
            )
            return cursor.rowcount == 1

        return await self._db.transaction(q)

    async def enable(self, account_id: str, secret: str, step: int, recovery_codes: Sequence[str]) -> bool:
        """Turn the pending `secret` on (its confirming code's `step` used up) with fresh recovery codes.

        False when that secret is no longer the pending one (replaced by another setup, or on already).
        """
        now = self.clock()

        def q(conn: Connection) -> bool:
            cursor = conn.execute(
                "UPDATE totp_secrets SET enabled_at = ?, last_step = ? "
                "WHERE account_id = ? AND secret = ? AND enabled_at IS NULL",
                (now, step, account_id, secret),
            )
            if cursor.rowcount != 1:
                return False
            conn.execute("DELETE FROM totp_recovery_codes WHERE account_id = ?", (account_id,))
            conn.executemany(
                "INSERT INTO totp_recovery_codes (account_id, code_sha256) VALUES (?, ?)",
                [(account_id, digest(code)) for code in recovery_codes],
            )
            return True

        return await self._db.transaction(q)

    async def disable(self, account_id: str) -> None:
        """Forget the secret, the recovery codes and the open tickets."""

        def q(conn: Connection) -> None:
            conn.execute("DELETE FROM totp_secrets WHERE account_id = ?", (account_id,))
            conn.execute("DELETE FROM totp_recovery_codes WHERE account_id = ?", (account_id,))
            conn.execute("DELETE FROM totp_tickets WHERE account_id = ?", (account_id,))

        await self._db.transaction(q)

    async def accept_step(self, account_id: str, step: int) -> bool:
        """Use up time step `step` of the enabled secret; False when it, or a newer one, was used (a replay)."""
        cursor = await self._db.run(
            lambda c: c.execute(
                "UPDATE totp_secrets SET last_step = ? "
                "WHERE account_id = ? AND enabled_at IS NOT NULL AND (last_step IS NULL OR last_step < ?)",
                (step, account_id, step),
            )
        )
        return cursor.rowcount == 1

    async def use_recovery_code(self, account_id: str, code: str) -> bool:
        """Use up one of the account's recovery codes; False when it is not one, or was used."""
        now = self.clock()
        cursor = await self._db.run(
            lambda c: c.execute(
                "UPDATE totp_recovery_codes SET used_at = ? "
                "WHERE account_id = ? AND code_sha256 = ? AND used_at IS NULL "
                "AND EXISTS (SELECT 1 FROM totp_secrets s WHERE s.account_id = ? AND s.enabled_at IS NOT NULL)",
                (now, account_id, digest(code), account_id),
            )
        )
        return cursor.rowcount == 1

    async def recovery_codes_left(self, account_id: str) -> int:
        row = await self._db.run(
            lambda c: c.execute(
                "SELECT COUNT(*) FROM totp_recovery_codes WHERE account_id = ? AND used_at IS NULL", (account_id,)
            ).fetchone()
        )
        return int(row[0])

    async def issue_ticket(self, account_id: str, ticket: str, ttl_seconds: float) -> float:
        """Keep `ticket` (its digest) for the account until it expires; returns when that is."""
        now = self.clock()
        expires_at = now + ttl_seconds

        def q(conn: Connection) -> None:
            # Expired tickets are pruned on write so the table holds only live ones.
            conn.execute("DELETE FROM totp_tickets WHERE expires_at <= ?", (now,))
            conn.execute(
                "INSERT INTO totp_tickets (ticket_sha256, account_id, expires_at) VALUES (?, ?, ?)",
                (digest(ticket), account_id, expires_at),
            )

        await self._db.transaction(q)
        return expires_at

    async def ticket_account(self, ticket: str) -> str | None:
        """The account a live ticket was given to; None for an unknown or expired ticket."""
        row = await self._db.run(
            lambda c: c.execute(
                "SELECT account_id FROM totp_tickets WHERE ticket_sha256 = ? AND expires_at > ?",
                (digest(ticket), self.clock()),
            ).fetchone()
        )
        return None if row is None else str(row["account_id"])

    async def use_ticket(self, ticket: str) -> bool:
        """Use the ticket up; False when it was already (or expired meanwhile)."""
        cursor = await self._db.run(
            lambda c: c.execute(
                "DELETE FROM totp_tickets WHERE ticket_sha256 = ? AND expires_at > ?", (digest(ticket), self.clock())
            )
        )
        return cursor.rowcount == 1


class CodeAttempts(AttemptLimits):
    """The limits on second-factor codes: per source address and per account, 10 failures in 10 minutes."""

    busy = "Too many code checks at once; try again in a few seconds"
    locked = "Too many wrong codes; try again later"

    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time, wait: float = 3.0) -> None:
        super().__init__(
            FailureLimiter(db, "totp", limit=10, window=600.0, clock=clock),
            FailureLimiter(db, "totp-account", limit=10, window=600.0, clock=clock),
            wait=wait,
        )

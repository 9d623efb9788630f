"""Passkeys and their WebAuthn challenges: all the SQL of the passkeys domain.

A passkey row is what a registration proved (credential id, COSE public key, sign count); a challenge
row is one handed out by an options route, taken (deleted) by the one verification that uses it.
"""

import time
import uuid
from collections.abc import Callable
from typing import Literal

import msgspec

from pheby.db import Connection, Database, Row

ChallengePurpose = Literal["register", "sign_in"]
CHALLENGE_TTL_SECONDS = 300.0
# Sign-in challenges are asked for without credentials: at most this many wait at once (each is
# purged when it expires), so a flood of options requests can't grow the table without bound.
MAX_OPEN_SIGN_IN_CHALLENGES = 1000
MAX_OPEN_REGISTER_CHALLENGES = 20  # per account: a signed-in client has no reason for more


class Passkey(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    account_id: str
    credential_id: bytes
    public_key: bytes
    sign_count: int
    transports: tuple[str, ...]
    name: str
    created_at: float
    last_used_at: float | None


class TakenChallenge(msgspec.Struct, frozen=True):
    challenge: bytes
    account_id: str | None
    token_id: str | None


def _row_to_passkey(row: Row) -> Passkey:
    return Passkey(
        id=row["id"],
        account_id=row["account_id"],
        credential_id=bytes(row["credential_id"]),
        public_key=bytes(row["public_key"]),
        sign_count=int(row["sign_count"]),
        transports=tuple(msgspec.json.decode(row["transports"], type=list[str])),
        name=row["name"],
        created_at=row["created_at"],
        last_used_at=row["last_used_at"],
    )


class PasskeyStore:
    """The `passkeys` table. `clock` is injectable so times can be tested."""

    def __init__(self, db: Database, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock

    async def add(
        self,
        account_id: str,
        *,
        credential_id: bytes,
        public_key: bytes,
        sign_count: int,
        transports: tuple[str, ...],
        name: str,
    ) -> Passkey | None:
        """The new passkey, or None when that credential id is registered already (to anyone)."""
        passkey_id, now = uuid.uuid4().hex, self._clock()
        encoded_transports = msgspec.json.encode(list(transports)).decode()

        def q(conn: Connection) -> bool:
            inserted = conn.execute(
                "INSERT INTO passkeys (id, account_id, credential_id, public_key, sign_count, transports, name, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (credential_id) DO NOTHING",
                (passkey_id, account_id, credential_id, public_key, sign_count, encoded_transports, name, now),
            ).rowcount
            return bool(inserted)

        if not await self._db.run(q):
            return None
        return await self.get(account_id, passkey_id)

    async def get(self, account_id: str, passkey_id: str) -> Passkey | None:
        row = await self._db.run(
            lambda c: c.execute(
                "SELECT * FROM passkeys WHERE id = ? AND account_id = ?", (passkey_id, account_id)
            ).fetchone()
        )
        return None if row is None else _row_to_passkey(row)

    async def by_credential_id(self, credential_id: bytes) -> Passkey | None:
        row = await self._db.run(
            lambda c: c.execute("SELECT * FROM passkeys WHERE credential_id = ?", (credential_id,)).fetchone()
        )
        return None if row is None else _row_to_passkey(row)

    async def of_account(self, account_id: str) -> list[Passkey]:
        rows = await self._db.run(
            lambda c: c.execute(
                "SELECT * FROM passkeys WHERE account_id = ? ORDER BY created_at, id", (account_id,)
            ).fetchall()
        )
        return [_row_to_passkey(r) for r in rows]

    async def delete(self, account_id: str, passkey_id: str) -> bool:
        """Remove the account's own passkey; False when it has none of that id."""
        deleted = await self._db.run(
            lambda c: (
                c.execute("DELETE FROM passkeys WHERE id = ? AND account_id = ?", (passkey_id, account_id)).rowcount
            )
        )
        return bool(deleted)

    async def delete_all(self, account_id: str) -> int:
        """Remove every passkey of the account (the operator's `pheby account passkeys-off`); how many."""
        deleted: int = await self._db.run(
            lambda c: c.execute("DELETE FROM passkeys WHERE account_id = ?", (account_id,)).rowcount
        )
        return deleted

    async def record_use(self, passkey: Passkey, new_sign_count: int) -> bool:
        """Store the count an assertion reported, only if the row still has the count it was checked
        against: of two assertions checked at once, one wins and the other is refused."""
        now = self._clock()
        updated = await self._db.run(
            lambda c: (
                c.execute(
                    "UPDATE passkeys SET sign_count = ?, last_used_at = ? WHERE id = ? AND sign_count = ?",
                    (new_sign_count, now, passkey.id, passkey.sign_count),
                ).rowcount
            )
        )
        return bool(updated)


class ChallengeStore:
    """The `webauthn_challenges` table: single-use, short-lived challenges kept on the server."""

    def __init__(
        self, db: Database, clock: Callable[[], float] = time.time, ttl_seconds: float = CHALLENGE_TTL_SECONDS
    ) -> None:
        self._db = db
        self._clock = clock
        self.ttl_seconds = ttl_seconds

    async def put(
        self,
        challenge: bytes,
        purpose: ChallengePurpose,
        *,
        account_id: str | None = None,
        token_id: str | None = None,
    ) -> bool:
        """Keep a new challenge; False (nothing kept) when too many of its kind are open (sign-in: in all;
        registration: the account's)."""
        now = self._clock()

        def q(conn: Connection) -> bool:
            conn.execute("DELETE FROM webauthn_challenges WHERE expires_at <= ?", (now,))
            if purpose == "sign_in":
                (open_count,) = conn.execute(
                    "SELECT COUNT(*) FROM webauthn_challenges WHERE purpose = 'sign_in'"
                ).fetchone()
                limit = MAX_OPEN_SIGN_IN_CHALLENGES
            else:
                (open_count,) = conn.execute(
                    "SELECT COUNT(*) FROM webauthn_challenges WHERE purpose = 'register' AND account_id = ?",
                    (account_id,),
                ).fetchone()
                limit = MAX_OPEN_REGISTER_CHALLENGES
            if open_count >= limit:
                return False
            conn.execute(
                "INSERT INTO webauthn_challenges (challenge, purpose, account_id, token_id, expires_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (challenge, purpose, account_id, token_id, now + self.ttl_seconds),
            )
            return True

        return await self._db.transaction(q)

    async def take(self, challenge: bytes, purpose: ChallengePurpose) -> TakenChallenge | None:
        """The live challenge of that purpose, removed as it is read (so it serves once); else None."""
        now = self._clock()
        row = await self._db.run(
            lambda c: c.execute(
                "DELETE FROM webauthn_challenges WHERE challenge = ? AND purpose = ? AND expires_at > ? "
                "RETURNING challenge, account_id, token_id",
                (challenge, purpose, now),
            ).fetchone()
        )
        if row is None:
            return None
        return TakenChallenge(bytes(row["challenge"]), row["account_id"], row["token_id"])

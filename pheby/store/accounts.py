"""Accounts, passwords and tokens: all the SQL of the accounts domain.

Passwords are scrypt hashes (`pheby.store.password_hashing`) of passwords the policy allows
(`pheby.store.password_policy`); tokens are random strings of which only a SHA-256 digest is stored.
The owner account is the one `PHEBY_SECRET` authenticates as.
"""

import hashlib
import os
import secrets
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Literal, TypeVar

import anyio
import msgspec

from pheby.db import Connection, Database, IntegrityError, Row
from pheby.db.in_lists import in_chunks
from pheby.errors import BadRequest, Conflict, NotFound
from pheby.store.lockout import PasswordHashing
from pheby.store.password_hashing import SCRYPT_COST, ScryptCost, check_password, hash_password, verify
from pheby.store.password_policy import check_new_password
from pheby.store.sessions import end_sessions_but

TokenKind = Literal["session", "api"]
OWNER_NAME = "owner"
_NAME_MAX = 64
T = TypeVar("T")


class HermesAccountSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Per-account Hermes connection; falls back to the server's when a field is empty."""

    url: str | None = None
    api_key: str | None = None
    home: str | None = None
    dashboard_url: str | None = None
    dashboard_token: str | None = None
    # Directories of the server's disk this account's MEDIA: files may be copied from (never with `url`).
    media_roots: tuple[str, ...] = ()


class Account(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    is_owner: bool
    disabled: bool
    created_at: float
    hermes: HermesAccountSettings


def media_roots_for(account: Account, server_roots: Sequence[Path]) -> tuple[Path, ...]:
    """The roots an account's `MEDIA:` files may be copied from on the server's disk."""
    if account.hermes.url:  # its own gateway: its agent's files are on another machine
        return ()
    if account.is_owner:
        return tuple(server_roots)
    return tuple(Path(root) for root in account.hermes.media_roots)


class IssuedToken(msgspec.Struct, frozen=True):
    token: str
    token_id: str
    expires_at: float | None


class ResolvedToken(msgspec.Struct, frozen=True):
    account: Account
    token_id: str
    kind: TokenKind
    expires_at: float | None = None
    last_used_at: float | None = None


class CredentialState(msgspec.Struct, frozen=True):
    """What decides whether an account's live sockets may stay: disabled, and when all was last revoked."""

    disabled: bool
    credentials_revoked_at: float | None


class PasswordChanged(msgspec.Struct, frozen=True):
    """A password set: the sessions it ended (their sockets are to be closed)."""

    ended_sessions: tuple[str, ...]


def _checked_and_hashed(current: str | None, encoded: str | None, new: str, cost: ScryptCost) -> str | None:
    """`new` hashed at `cost` if `current` is the password of `encoded` (or no check is asked: None), else
    None. One worker call: the two hashes never hold their memory at once."""
    if current is not None and not check_password(current, encoded, cost):
        return None
    return hash_password(new, cost)


async def _hashed(hashing: PasswordHashing | None, fn: Callable[..., T], *args: object) -> T:
    """`fn(*args)` on a worker thread: in the `hashing` limiter when given (it may raise RateLimited)."""
    if hashing is not None:
        return await hashing.run(fn, *args)
    return await anyio.to_thread.run_sync(fn, *args)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _row_to_account(row: Row) -> Account:
    return Account(
        id=row["id"],
        name=row["name"],
        is_owner=bool(row["is_owner"]),
        disabled=bool(row["disabled"]),
        created_at=row["created_at"],
        hermes=HermesAccountSettings(
            url=row["hermes_url"],
            api_key=row["hermes_api_key"],
            home=row["hermes_home"],
            dashboard_url=row["hermes_dashboard_url"],
            dashboard_token=row["hermes_dashboard_token"],
            media_roots=tuple(msgspec.json.decode(row["media_roots"] or "[]", type=list[str])),
        ),
    )


class Accounts:
    """The accounts service. `clock` is injectable so expiry can be tested; `password_cost` so tests
    that are not about hashing can make their accounts cheaply (the server always uses `SCRYPT_COST`)."""

    def __init__(
        self, db: Database, clock: Callable[[], float] = time.time, *, password_cost: ScryptCost = SCRYPT_COST
    ) -> None:
        self._db = db
        self._clock = clock
        self._password_cost = password_cost

    async def ensure_owner(self) -> Account:
        """Return the owner account, creating it on first start."""
        now = self._clock()

        def q(conn: Connection) -> Row:
            conn.execute(
                "INSERT INTO accounts (id, name, is_owner, created_at) VALUES (?, ?, 1, ?) ON CONFLICT DO NOTHING",
                (uuid.uuid4().hex, OWNER_NAME, now),
            )
            row: Row = conn.execute("SELECT * FROM accounts WHERE is_owner = 1").fetchone()
            return row

        return _row_to_account(await self._db.transaction(q))

    async def create(self, name: str, password: str | None = None) -> Account:
        """A new account; its password, if any, must pass the policy (else `Unprocessable`)."""
        name = name.strip()
        if not name or len(name) > _NAME_MAX or any(c.isspace() or not c.isprintable() for c in name):
            raise BadRequest(f"Account names are 1-{_NAME_MAX} printable characters without spaces")
        encoded = None
        if password:
            await anyio.to_thread.run_sync(check_new_password, password, name)
            encoded = await anyio.to_thread.run_sync(hash_password, password, self._password_cost)
        account_id, now = uuid.uuid4().hex, self._clock()

        def q(conn: Connection) -> None:
            conn.execute(
                "INSERT INTO accounts (id, name, password_hash, created_at) VALUES (?, ?, ?, ?)",
                (account_id, name, encoded, now),
            )

        try:
            await self._db.run(q)
        except IntegrityError:
            raise Conflict(f"Account {name!r} already exists") from None
        return await self.get(account_id)

    async def get(self, account_id: str) -> Account:
        row = await self._db.run(lambda c: c.execute("SELECT * FROM accounts WHERE id = ?", (account_id,)).fetchone())
        if row is None:
            raise NotFound("Account not found")
        return _row_to_account(row)

    async def list_all(self) -> list[Account]:
        rows = await self._db.run(lambda c: c.execute("SELECT * FROM accounts ORDER BY created_at, name").fetchall())
        return [_row_to_account(r) for r in rows]

    async def list_enabled(self) -> list[Account]:
        rows = await self._db.run(lambda c: c.execute("SELECT * FROM accounts WHERE disabled = 0").fetchall())
        return [_row_to_account(r) for r in rows]

    async def get_by_name(self, name: str) -> Account:
        row = await self._db.run(lambda c: c.execute("SELECT * FROM accounts WHERE name = ?", (name,)).fetchone())
        if row is None:
            raise NotFound("Account not found")
        return _row_to_account(row)

    async def set_disabled(self, name: str, disabled: bool = True) -> Account:
        account = await self.get_by_name(name)
        await self._db.run(
            lambda c: c.execute("UPDATE accounts SET disabled = ? WHERE id = ?", (int(disabled), account.id))
        )
        return await self.get(account.id)

    async def set_hermes(self, name: str, hermes: HermesAccountSettings) -> None:
        if hermes.url and hermes.media_roots:
            raise BadRequest(
                "An account with its own Hermes gateway can't be given media roots: its agent's files are not on "
                "this server's disk (the companion plugin pushes them)"
            )
        if any(not os.path.isabs(root) for root in hermes.media_roots):
            raise BadRequest("Media roots must be absolute paths")
        account = await self.get_by_name(name)
        roots = msgspec.json.encode(list(hermes.media_roots)).decode() if hermes.media_roots else None
        await self._db.run(
            lambda c: c.execute(
                "UPDATE accounts SET hermes_url = ?, hermes_api_key = ?, hermes_home = ?, "
                "hermes_dashboard_url = ?, hermes_dashboard_token = ?, media_roots = ? WHERE id = ?",
                (
                    hermes.url,
                    hermes.api_key,
                    hermes.home,
                    hermes.dashboard_url,
                    hermes.dashboard_token,
                    roots,
                    account.id,
                ),
            )
        )

    async def verify_password(
        self, name: str, password: str, *, hashing: PasswordHashing | None = None
    ) -> Account | None:
        """The enabled account whose password this is, else None (same cost either way).

        A right password whose hash is weaker than the current cost is hashed again, in the same worker
        call, and the new hash stored. With `hashing`, the hash runs in that limiter (the login route's),
        which may raise RateLimited.
        """
        row = await self._db.run(lambda c: c.execute("SELECT * FROM accounts WHERE name = ?", (name,)).fetchone())
        encoded = row["password_hash"] if row is not None else None
        outcome = await _hashed(hashing, verify, password, encoded, self._password_cost)
        if not outcome.ok or row is None or row["disabled"]:
            return None
        if outcome.rehashed is not None:
            await self._replace_hash(row["id"], encoded, outcome.rehashed, keep_session=None, end_sessions=False)
        return _row_to_account(row)

    async def has_password(self, account_id: str) -> bool:
        row = await self._db.run(
            lambda c: c.execute("SELECT password_hash FROM accounts WHERE id = ?", (account_id,)).fetchone()
        )
        return row is not None and row["password_hash"] is not None

    async def set_password(
        self,
        account_id: str,
        new_password: str,
        *,
        current_password: str | None = None,
        hashing: PasswordHashing | None = None,
        keep_session: str | None = None,
    ) -> PasswordChanged | None:
        """Give the account `new_password` and end its sessions but `keep_session`, in one transaction.

        A new password the policy refuses raises `Unprocessable` before any hash. With `current_password`
        (a person changing their own) the account's password must be it, else None and nothing changes;
        `""` sets a first password on an account that has none (the caller decides who may). Without it
        (the operator's `pheby account password`) nothing is checked. API tokens are not touched: a
        password change ends sign-ins, not the keys the operator handed out.
        """
        row = await self._db.run(
            lambda c: c.execute("SELECT name, password_hash FROM accounts WHERE id = ?", (account_id,)).fetchone()
        )
        if row is None:
            raise NotFound("Account not found")
        await anyio.to_thread.run_sync(check_new_password, new_password, row["name"])
        encoded: str | None = row["password_hash"]
        first = current_password == "" and encoded is None
        check = current_password if current_password is not None and not first else None
        replacement = await _hashed(hashing, _checked_and_hashed, check, encoded, new_password, self._password_cost)
        if replacement is None:
            return None
        ended = await self._replace_hash(account_id, encoded, replacement, keep_session=keep_session, end_sessions=True)
        return PasswordChanged(ended_sessions=ended)

    async def _replace_hash(
        self, account_id: str, old: str | None, new: str, *, keep_session: str | None, end_sessions: bool
    ) -> tuple[str, ...]:
        """Store `new` in place of `old` (unless another change came first: `Conflict`) and, if asked, end
        the account's sessions but `keep_session`; the ended sessions' ids."""
        now = self._clock()

        def q(conn: Connection) -> tuple[str, ...]:
            replaced = conn.execute(
                "UPDATE accounts SET password_hash = ? WHERE id = ? AND password_hash IS NOT DISTINCT FROM ?",
                (new, account_id, old),
            ).rowcount
            if not replaced:
                raise Conflict("The password was changed meanwhile; try again")
            if not end_sessions:
                return ()
            return tuple(end_sessions_but(conn, account_id, keep_session, now))

        try:  # a change is on disk when it returns: a crash must not bring the old password or sessions back
            return await self._db.transaction(q, durable=end_sessions)
        except Conflict:
            if end_sessions:
                raise
            return ()  # a rehash at sign-in that lost to a change: the change's hash stays

    async def issue_token(
        self,
        account_id: str,
        kind: TokenKind,
        ttl_seconds: float | None,
        *,
        device: str | None = None,
        method: str | None = None,
    ) -> IssuedToken:
        """A new token; `method` (how the person proved who they are, just now) marks it authenticated now."""
        token = "phb_" + secrets.token_urlsafe(32)
        token_id, now = uuid.uuid4().hex, self._clock()
        expires_at = now + ttl_seconds if ttl_seconds is not None else None
        authenticated_at = now if method is not None else None
        await self._db.run(
            lambda c: c.execute(
                "INSERT INTO auth_tokens (id, account_id, token_sha256, kind, created_at, expires_at, "
                "device, method, last_used_at, authenticated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    token_id,
                    account_id,
                    token_digest(token),
                    kind,
                    now,
                    expires_at,
                    device,
                    method,
                    now,
                    authenticated_at,
                ),
            )
        )
        return IssuedToken(token=token, token_id=token_id, expires_at=expires_at)

    async def sign_in_method(self, token_id: str) -> str | None:
        """How the session `token_id` was signed in (`pheby.signin.sessions.SignInMethod`); None for an API token."""
        row = await self._db.run(
            lambda c: c.execute("SELECT method FROM auth_tokens WHERE id = ?", (token_id,)).fetchone()
        )
        return None if row is None else row["method"]

    async def resolve_token(self, token: str) -> ResolvedToken | None:
        """The live token's account: not revoked, not expired, account not disabled."""
        now = self._clock()
        row = await self._db.run(
            lambda c: c.execute(
                "SELECT a.*, t.id AS token_id, t.kind AS token_kind, t.expires_at AS token_expires_at, "
                "t.last_used_at AS token_last_used_at "
                "FROM auth_tokens t JOIN accounts a ON a.id = t.account_id "
                "WHERE t.token_sha256 = ? AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > ?) "
                "AND a.disabled = 0",
                (token_digest(token), now),
            ).fetchone()
        )
        if row is None:
            return None
        return ResolvedToken(
            account=_row_to_account(row),
            token_id=row["token_id"],
            kind=row["token_kind"],
            expires_at=row["token_expires_at"],
            last_used_at=row["token_last_used_at"],
        )

    async def mark_used(self, token_id: str) -> None:
        """The token authenticated something just now (the caller throttles how often this is written)."""
        now = self._clock()
        await self._db.run(lambda c: c.execute("UPDATE auth_tokens SET last_used_at = ? WHERE id = ?", (now, token_id)))

    async def revoke_token(self, token_id: str) -> None:
        now = self._clock()
        await self._db.run(
            lambda c: c.execute(
                "UPDATE auth_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (now, token_id)
            )
        )

    async def revoke_all(self, name: str) -> tuple[Account, int]:
        """Revoke every token and session of the account (one transaction); the account and how many."""
        account = await self.get_by_name(name)
        now = self._clock()

        def q(conn: Connection) -> int:
            revoked = conn.execute(
                "UPDATE auth_tokens SET revoked_at = ? WHERE account_id = ? AND revoked_at IS NULL", (now, account.id)
            ).rowcount
            conn.execute("UPDATE accounts SET credentials_revoked_at = ? WHERE id = ?", (now, account.id))
            return revoked

        return account, await self._db.transaction(q)

    async def credential_states(self) -> dict[str, CredentialState]:
        """Every account's `CredentialState`, by id (a handful of rows: accounts are few)."""
        rows = await self._db.run(
            lambda c: c.execute("SELECT id, disabled, credentials_revoked_at FROM accounts").fetchall()
        )
        return {r["id"]: CredentialState(bool(r["disabled"]), r["credentials_revoked_at"]) for r in rows}

    async def live_tokens(self, token_ids: Collection[str]) -> set[str]:
        """Which of `token_ids` still work: not revoked, not expired, their account not disabled. One query."""
        if not token_ids:
            return set()
        now, wanted = self._clock(), sorted(token_ids)

        def q(c: Connection) -> list[Row]:
            rows: list[Row] = []
            for chunk, marks in in_chunks(wanted):
                rows += c.execute(
                    "SELECT t.id FROM auth_tokens t JOIN accounts a ON a.id = t.account_id "  # noqa: S608 - placeholders only
                    f"WHERE t.id IN ({marks}) AND t.revoked_at IS NULL "
                    "AND (t.expires_at IS NULL OR t.expires_at > ?) AND a.disabled = 0",
                    (*chunk, now),
                ).fetchall()
            return rows

        rows = await self._db.run(q)
        return {r[0] for r in rows}

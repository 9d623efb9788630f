"""The SQLite metadata database: one connection on one dedicated thread.

Every query runs on that thread (`await db.run(fn)`), so the event loop never blocks on
SQLite and no two statements interleave; `transaction` wraps a function in BEGIN IMMEDIATE.
Numbered migrations in `pheby/migrations/NNNN_name.sql` are applied at start-up, once each, and
recorded in `schema_migrations`. A database a newer server migrated further than this code knows
(`SchemaTooNew`) is refused before anything is written to it: migrations only move forward.
"""

import asyncio
import functools
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class SchemaTooNew(Exception):
    """The database holds migrations newer than this code's: a newer server wrote it. Nothing was changed."""

    def __init__(self, found: int, known: int) -> None:
        self.found = found
        self.known = known
        super().__init__(
            f"the data dir's schema is version {found}; this server knows up to {known}: "
            "upgrade the server (or restore a backup made for this version)"
        )


class Database:
    """Async facade over one sqlite3 connection owned by a single worker thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite")
        self._conn: sqlite3.Connection | None = None

    async def open(self) -> None:
        """Open the connection (WAL, foreign keys on) and apply pending migrations.

        Raises `SchemaTooNew`, having changed nothing, when a newer server migrated the database further."""
        await self._submit(self._open)

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            refuse_newer(conn)  # before any pragma or migration writes to it
        except BaseException:
            conn.close()
            raise
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=5000")
        self._conn = conn
        apply_migrations(conn)

    async def close(self) -> None:
        """Close the connection and stop the worker thread."""
        if self._conn is not None:
            await self._submit(self._conn.close)
            self._conn = None
        self._executor.shutdown(wait=True)

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn(conn)` on the database thread (autocommit: one statement, one transaction)."""
        return await self._submit(lambda: fn(self._connection()))

    async def transaction(self, fn: Callable[[sqlite3.Connection], T], *, durable: bool = False) -> T:
        """Run `fn(conn)` inside BEGIN IMMEDIATE … COMMIT, rolled back if it raises.

        `durable`: the commit is on disk when this returns. With WAL and synchronous=NORMAL (the
        default here) a commit survives a crash of the process but not of the machine; for this one
        the WAL is fsynced at commit (synchronous=FULL), then the connection goes back to NORMAL.
        """

        def wrapped() -> T:
            conn = self._connection()
            if durable:
                conn.execute("PRAGMA synchronous=FULL")
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = fn(conn)
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            finally:
                if durable:
                    conn.execute("PRAGMA synchronous=NORMAL")
            return result

        return await self._submit(wrapped)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("database is not open")
        return self._conn

    async def _submit(self, fn: Callable[[], T]) -> T:
        return await asyncio.wrap_future(self._executor.submit(fn))


def check_schema_version(path: Path) -> None:
    """Raise `SchemaTooNew` if the database at `path` was migrated past this code's newest migration.

    Only reads: a missing database stays missing, an existing one is opened, queried and closed (the
    `-wal` and `-shm` files the read makes are gone again once it closes)."""
    if not path.exists():
        return
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        refuse_newer(conn)
    finally:
        conn.close()


def schema_version(conn: sqlite3.Connection) -> int:
    """The newest migration recorded in the database (0 for a new one)."""
    table = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'").fetchone()
    if table is None:
        return 0
    (version,) = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()
    return int(version)


def newest_version() -> int:
    """The newest migration this code has."""
    return migration_scripts()[-1][0]


def refuse_newer(conn: sqlite3.Connection) -> None:
    """Raise `SchemaTooNew` when the database records a migration this code doesn't have."""
    found, known = schema_version(conn), newest_version()
    if found > known:
        raise SchemaTooNew(found, known)


def apply_migrations(conn: sqlite3.Connection, up_to: int | None = None) -> list[int]:
    """Apply every numbered migration not yet recorded (up to version `up_to`, default all); return
    the versions applied. Raises `SchemaTooNew` (applying nothing) for a database ahead of this code."""
    refuse_newer(conn)
    conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at REAL)")
    done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
    applied: list[int] = []
    for version, sql in migration_scripts():
        if version in done or (up_to is not None and version > up_to):
            continue
        # executescript commits first, so the whole script and its record go in one explicit transaction.
        try:
            conn.executescript(
                f"BEGIN IMMEDIATE;\n{sql}\n"
                f"INSERT INTO schema_migrations (version, applied_at) VALUES ({version}, strftime('%s', 'now'));\n"
                "COMMIT;"
            )
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        applied.append(version)
    return applied


@functools.cache
def migration_scripts() -> tuple[tuple[int, str], ...]:
    """This code's migrations, (version, SQL) in order (read once: they ship with the code)."""
    folder = resources.files("pheby") / "migrations"
    scripts: list[tuple[int, str]] = []
    for entry in folder.iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:4].isdigit():
            scripts.append((int(name[:4]), entry.read_text(encoding="utf-8")))
    return tuple(sorted(scripts))
